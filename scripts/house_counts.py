"""The counts of issue 38, reproducible by anyone: how the house is built, in numbers.

    python scripts/house_counts.py            # print the counts
    python scripts/house_counts.py --check    # exit 1 when a target is missed

- package cycles: circles in the import graph between the top-level packages (and top-level
  modules) of ``arena_ls``; every import counts, inside functions and under ``TYPE_CHECKING``
  too;
- arrows up: imports from a room to a room on a higher floor or beside it (the floors of
  ``tests/unit/test_layers.py``, the one place they are written);
- the largest top-level package's share of ``arena_ls``'s lines (target: under 15 %);
- modules of ``arena_ls`` over 600 lines, and files of the editor clients over 600 lines
  (``editor-client/``: TypeScript, JavaScript and Lua, without dependencies, builds and
  generated tables).
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "arena_ls"
sys.path.insert(0, str(REPO))
# The floors are the layer test's, and a module's nodes come from the tests' parse-once cache: a test
# process that already walked the package (the structure tests) reads no file twice.
from tests.helpers.sources import nodes as source_nodes  # noqa: E402

LONGEST_MODULE = 600
LARGEST_SHARE = 0.15
CLIENT_SUFFIXES = (".ts", ".mjs", ".js", ".lua")
CLIENT_SKIPPED = ("node_modules", "out", "dist", "build", ".vscode-test", "e2e-cache")


def python_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8", errors="replace").splitlines())


def package_of(path: Path) -> str:
    """The top-level part of ``arena_ls`` a module belongs to (``arena_ls.lifecycle`` for
    ``lifecycle/backends/base.py``); a top-level module (``platform.py``) is a part of its own,
    as it is a room of the floors. A package importing its own sub-package is no cycle."""
    parts = path.relative_to(REPO).with_suffix("").parts
    if len(parts) == 2 and parts[1] == "__init__":
        return parts[0]
    return ".".join(parts[:2])


def _importing_package(path: Path) -> str:
    """The package relative imports of ``path`` are resolved against."""
    return ".".join(path.relative_to(REPO).parent.parts)


def imports_of(path: Path) -> Iterator[str]:
    package = _importing_package(path)
    for node in source_nodes(path):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def package_graph(packages: set[str]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import (the longest package prefix of each name)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in python_modules():
        source = package_of(path)
        graph[source]
        for name in imports_of(path):
            target = _longest_package(name, packages)
            if target is not None and target != source:
                graph[source].add(target)
    return graph


def _longest_package(name: str, packages: set[str]) -> str | None:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        candidate = ".".join(parts[:cut])
        if candidate in packages:
            return candidate
    return None


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one package: each is a package cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def arrows_up() -> list[str]:
    """Imports that point up or sideways between rooms (the floors of tests/unit/test_layers.py)."""
    from tests.unit.test_layers import FLOORS, imported_modules

    floor_of: dict[str, tuple[int, int]] = {}
    for floor, rooms in enumerate(FLOORS):
        for room, members in enumerate(rooms):
            for member in members:
                floor_of[member] = (floor, room)
    found = []
    for path in python_modules():
        own = floor_of.get(path.relative_to(PACKAGE).parts[0].removesuffix(".py"))
        for line, name in imported_modules(path):
            parts = name.split(".")
            if parts[0] != "arena_ls" or len(parts) < 2 or own is None:
                continue
            theirs = floor_of.get(parts[1])
            if theirs is not None and theirs != own and theirs[0] >= own[0]:
                found.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    return found


def package_shares() -> list[tuple[str, int, float]]:
    """(top-level package or module, lines, share of arena_ls), largest first."""
    lines: dict[str, int] = defaultdict(int)
    for path in python_modules():
        lines[path.relative_to(PACKAGE).parts[0]] += line_count(path)
    total = sum(lines.values())
    return sorted(((name, n, n / total) for name, n in lines.items()), key=lambda row: -row[1])


def long_files(paths: list[Path]) -> list[tuple[str, int]]:
    rows = [(str(p.relative_to(REPO)), line_count(p)) for p in paths]
    return sorted((row for row in rows if row[1] > LONGEST_MODULE), key=lambda row: -row[1])


def client_files() -> list[Path]:
    """The editor clients' own sources: a skipped folder (node_modules, a build) is not entered."""
    found = []
    for folder, subfolders, names in os.walk(REPO / "editor-client"):
        subfolders[:] = [name for name in subfolders if name not in CLIENT_SKIPPED]
        found += [Path(folder, name) for name in names if Path(name).suffix in CLIENT_SUFFIXES]
    return sorted(p for p in found if ".generated." not in p.name and not generated(p))


def generated(path: Path) -> bool:
    """A file a command writes (its first line says ``GENERATED by``): AIDE's bundle of the VS Code
    core (lib/core.mjs), the clients' words (wording.ts, wording.lua). Its source is counted."""
    with path.open(encoding="utf-8", errors="replace") as file:
        first = file.readline()
    return first.startswith(("// GENERATED by", "-- GENERATED by"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    modules = python_modules()
    packages = {package_of(p) for p in modules}
    cycles = strongly_connected(package_graph(packages))
    up = arrows_up()
    shares = package_shares()
    long_modules = long_files(modules)
    long_clients = long_files(client_files())
    total = sum(n for _, n, _ in shares)
    print(f"arena_ls: {len(modules)} modules, {total} lines, {len(packages)} top-level parts")
    print(f"package cycles: {len(cycles)}")
    for cycle in cycles:
        print(f"  {' <-> '.join(cycle)}")
    print(f"arrows up or sideways between rooms: {len(up)}")
    for arrow in up[:20]:
        print(f"  {arrow}")
    print("largest top-level parts of arena_ls:")
    for name, lines, share in shares[:5]:
        print(f"  {name}: {lines} lines, {share:.1%}")
    print(f"modules over {LONGEST_MODULE} lines: {len(long_modules)}")
    for name, lines in long_modules:
        print(f"  {name}: {lines}")
    print(f"editor-client files over {LONGEST_MODULE} lines: {len(long_clients)}")
    for name, lines in long_clients:
        print(f"  {name}: {lines}")
    missed = bool(cycles or up or long_modules or long_clients or shares[0][2] >= LARGEST_SHARE)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
