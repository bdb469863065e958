"""No import circle inside ``arena_ls``: the modules form a graph without cycles.

Every import statement counts as an edge, at any depth: inside functions,
under ``TYPE_CHECKING``, relative or absolute. A circle hidden behind a
function-local import or a ``TYPE_CHECKING`` block is still a circle: two
modules that need each other belong in one room, or a third module holds
what they share. (A function-local import kept for start-up speed is fine,
and still counts as an edge here.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.sources import nodes

pytestmark = pytest.mark.xdist_group("sources")  # one worker parses them once (helpers/sources.py)

PACKAGE = Path(__file__).resolve().parents[2] / "arena_ls"


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.Import | ast.ImportFrom, package: str, modules: set[str]) -> set[str]:
    """The modules an import statement names: ``from a import b`` names ``a.b`` when that is a
    module, else ``a`` (where ``b`` is defined)."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parent = ".".join(parts[: len(parts) - node.level + 1])
        base = f"{parent}.{base}" if base else parent
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}


def import_graph(root: Path, top: str = "arena_ls") -> dict[str, set[str]]:
    """module -> the modules of ``top`` it imports (each resolved to a module that exists)."""
    files = {module_name(p, root): p for p in sorted((root / top).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        package = name if is_package else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in nodes(path):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(node, package, set(files))
        graph[name] = {target for target in edges if target in files and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None (an iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if state.get(start):
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def test_no_import_circle_inside_arena_ls() -> None:
    graph = import_graph(PACKAGE.parent)
    assert len(graph) > 50, "the graph misses modules: the walker is broken"
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_finds_a_circle_hidden_in_a_function_or_type_checking_block(tmp_path: Path) -> None:
    """The test above can fail: a circle through a function-local, a ``TYPE_CHECKING`` and a
    relative import is found and named."""
    write_package(
        tmp_path,
        {
            "arena_ls/__init__.py": "",
            "arena_ls/protocol/__init__.py": "",
            "arena_ls/protocol/server.py": "from arena_ls.protocol.workspace import Workspace\n",
            "arena_ls/protocol/workspace.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from arena_ls.protocol import jobs\n"
            ),
            "arena_ls/protocol/jobs.py": "def f():\n    from .server import ArenaServer\n",
            "arena_ls/lifecycle.py": "import arena_ls.protocol.jobs\n",
        },
    )
    graph = import_graph(tmp_path)
    assert graph["arena_ls.lifecycle"] == {"arena_ls.protocol.jobs"}
    assert find_cycle(graph) == [
        "arena_ls.protocol.jobs",
        "arena_ls.protocol.server",
        "arena_ls.protocol.workspace",
        "arena_ls.protocol.jobs",
    ]


def test_the_checker_passes_a_graph_without_circles(tmp_path: Path) -> None:
    write_package(
        tmp_path,
        {
            "arena_ls/__init__.py": "",
            "arena_ls/a.py": "from arena_ls import b\nimport arena_ls.c\n",
            "arena_ls/b.py": "from arena_ls.c import x\n",
            "arena_ls/c.py": "x = 1\n",
        },
    )
    graph = import_graph(tmp_path)
    assert graph["arena_ls.a"] == {"arena_ls.b", "arena_ls.c"}
    assert find_cycle(graph) is None


def test_no_getattr_feature_lookups_in_the_protocol_layer() -> None:
    """Features are found by type (``get_feature``) and called through their hooks, never by
    looking an attribute up by name on the server, a workspace or a run."""
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted((PACKAGE / "protocol").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "getattr(" in line or "setattr(" in line
    ]
    assert offending == []
