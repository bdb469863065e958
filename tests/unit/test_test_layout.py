"""The test suite's own layout: its helpers live in tests/helpers, never in benchmarks/.

Benchmarks may import test helpers (the cluster benchmark's Ray head is
``tests/helpers/rayhead.py``); the tests never import ``benchmarks`` (they may run
it, as ``tests/benchmarks/test_quick_bench.py`` does, or read one by path to test it).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.sources import parsed

TESTS = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_no_test_imports_the_benchmarks() -> None:
    offenders = {
        str(path.relative_to(TESTS.parent)): sorted(
            m for m in _imports(path) if m.split(".")[0] == "benchmarks"
        )
        for path in TESTS.rglob("*.py")
        if "fixtures" not in path.parts
    }
    assert {path: modules for path, modules in offenders.items() if modules} == {}
