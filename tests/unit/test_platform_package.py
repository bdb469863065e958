"""``arena_ls.platform`` is a package of one module per concern (issue 38), and callers still
write ``platform.kill_tree(...)`` or ``from arena_ls.platform import X``: its ``__init__``
re-exports every public name of every module, bound to the same object. A name added to a
module and forgotten there fails here, as does one name defined by two modules (the
re-export would hide one of them)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

from arena_ls import platform

PACKAGE = Path(platform.__file__).parent


def concern_modules() -> list[str]:
    return sorted(p.stem for p in PACKAGE.glob("*.py") if not p.stem.startswith("__"))


def public_names(module: str) -> set[str]:
    """The public names ``module`` defines at its top level (assigned, defined, or under an ``if``)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    statements = [*tree.body, *(s for n in tree.body if isinstance(n, ast.If) for s in [*n.body, *n.orelse])]
    names: set[str] = set()
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {name for name in names if not name.startswith("_") and name != "log"}


def test_every_public_name_of_every_module_is_the_packages_own() -> None:
    modules = concern_modules()
    assert {"files", "launching", "processes", "trainers", "winapi"} <= set(modules), modules
    missing = []
    for module in modules:
        loaded = importlib.import_module(f"arena_ls.platform.{module}")
        for name in sorted(public_names(module)):
            if getattr(platform, name, None) is not getattr(loaded, name):
                missing.append(f"{module}.{name}")
    assert missing == [], "not re-exported by arena_ls/platform/__init__.py"
    assert set(platform.__all__) == set().union(*(public_names(m) for m in modules))


def test_no_two_modules_define_the_same_public_name() -> None:
    seen: dict[str, str] = {}
    twice = []
    for module in concern_modules():
        for name in public_names(module):
            if name in seen:
                twice.append(f"{name}: {seen[name]} and {module}")
            seen[name] = module
    assert twice == []


def test_the_windows_intermediate_still_runs_as_python_dash_m_arena_ls_platform() -> None:
    """``spawn_detached`` starts ``python -m arena_ls.platform detach REQUEST`` on Windows."""
    usage = subprocess.run(
        [sys.executable, "-m", "arena_ls.platform"], capture_output=True, text=True, timeout=60, check=False
    )
    assert usage.returncode == 2 and "usage: python -m arena_ls.platform detach" in usage.stderr
