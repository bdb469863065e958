"""The test suite's own layout: its helpers live in tests/helpers, never in benchmarks/.

Benchmarks may import test helpers (the cluster benchmark's Ray head is
``tests/helpers/rayhead.py``); the tests never import ``benchmarks`` (they may run
it, as ``tests/benchmarks/test_quick_bench.py`` does, or read one by path to test it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.lazy_import import LazyModule
from tests.helpers.sources import nodes, parsed

pytestmark = pytest.mark.xdist_group("sources")  # one worker parses them once (helpers/sources.py)

TESTS = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in nodes(path):
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


HEAVY = ("torch", "transformers", "lightning", "pytorch_lightning", "accelerate")
"""Seconds to import each: a test module that imports one at its top makes every ``pytest -n``
worker pay for it while the suite is collected, the fast lane's included."""


def top_level_heavy_imports(path: Path) -> list[str]:
    """The heavy modules ``path`` imports when it is loaded (``import``, or ``importorskip`` in a
    module-level assignment); inside a function or fixture is fine."""
    found: list[str] = []
    for node in parsed(path).body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, (ast.Assign, ast.Expr)) and isinstance(node.value, ast.Call):
            call = node.value
            if ast.unparse(call.func).endswith("importorskip") and call.args:
                argument = call.args[0]
                if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                    names = [argument.value]
        found += [name for name in names if name.split(".")[0] in HEAVY]
    return found


def test_no_test_module_imports_a_framework_while_it_is_collected() -> None:
    offenders = {
        str(path.relative_to(TESTS.parent)): top_level_heavy_imports(path)
        for path in TESTS.rglob("test_*.py")
        if "fixtures" not in path.parts and "trainers" not in path.parts
    }
    assert {path: names for path, names in offenders.items() if names} == {}, (
        "import it in a module-scoped fixture (tests/trainer/test_kit.py's ``torch``)"
    )


def test_the_heavy_import_finder_sees_both_spellings(tmp_path: Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text(
        'import torch.nn\nhf = pytest.importorskip("transformers")\ndef f():\n    import lightning\n'
    )
    assert top_level_heavy_imports(module) == ["torch.nn", "transformers"]


def test_a_lazy_module_is_imported_by_its_first_use_not_by_pytest_looking_at_it() -> None:
    lazy = LazyModule("json")
    assert not hasattr(lazy, "__pytest_wrapped__") and not hasattr(lazy, "_pytestfixturefunction")
    assert lazy.dumps([1]) == "[1]"
