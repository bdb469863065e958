"""The floors of the house: lower packages never reach up into the protocol layer or the client.

Every import statement counts, including ones inside functions and under
``TYPE_CHECKING``: a lower package that needs the protocol layer is in the
wrong room, however the import is hidden.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "arena_ls"
LOWER = [
    "lifecycle",
    "gates",
    "health",
    "manifest",
    "insights",
    "services",
    "platform.py",
    "settings.py",
    "errors.py",
]
UPPER = ("arena_ls.protocol", "arena_ls.client")


def imported_modules(path: Path, root: Path = PACKAGE.parent) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``; relative imports resolved against its package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def modules_of(entry: str) -> list[Path]:
    target = PACKAGE / entry
    return [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))


@pytest.mark.parametrize("entry", LOWER)
def test_a_lower_package_never_imports_the_protocol_layer_or_the_client(entry: str) -> None:
    files = modules_of(entry)
    assert files, f"arena_ls/{entry} has no modules: the layer list is out of date"
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if module.startswith(UPPER)
    ]
    assert offending == []


def test_the_checker_sees_hidden_and_relative_imports(tmp_path: Path) -> None:
    """The test above can fail: imports inside functions and relative ones are found."""
    probe = tmp_path / "arena_ls" / "lifecycle" / "x.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f():\n    from arena_ls.protocol import server\n    from ..client import cli\n")
    modules = [module for _, module in imported_modules(probe, root=tmp_path)]
    assert modules == ["arena_ls.protocol.server", "arena_ls.client.cli"]
