"""The suite-wide list of POSIX-only tests (tests/conftest.py) names tests that exist."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import POSIX_ONLY

ROOT = Path(__file__).resolve().parents[2]


def test_every_posix_only_id_names_an_existing_test_and_its_variant_exists() -> None:
    for nodeid, reason in POSIX_ONLY.items():
        path, name = nodeid.split("::")
        tree = ast.parse((ROOT / path).read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert name in defined, nodeid
        if "tests/windows/test_on_windows.py::" in reason:
            variant = reason.split("tests/windows/test_on_windows.py::", 1)[1].split(")")[0]
            variants = ast.parse((ROOT / "tests/windows/test_on_windows.py").read_text())
            assert variant in {n.name for n in ast.walk(variants) if isinstance(n, ast.AsyncFunctionDef)}, (
                reason
            )
