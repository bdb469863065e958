"""The lint benchmark runs and its generated trainer is a clean one (no timing asserted)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from arena_ls.gates import lint_trainer
from tests.helpers.by_path import load_module

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_lint.py"


def _load() -> ModuleType:
    return load_module("bench_lint", BENCH)


@pytest.mark.process  # bench_lint.run times the lint in subprocesses (loaded by path: not followed)
def test_quick_run_reports_the_figures() -> None:
    figures = _load().run(quick=True)
    assert figures["lines"] >= 1000
    assert figures["findings"] == 0
    for key in ("lint_ms", "ast_parse_ms", "ast_parse_no_gc_ms", "ratio", "analysis_ms"):
        assert figures[key] > 0 or key == "analysis_ms"
    assert isinstance(figures["meets_ratio"], bool)


def test_generated_trainer_is_long_and_clean() -> None:
    text = _load().generate_trainer()
    assert text.count("\n") >= 10_000
    assert lint_trainer(text, fp32_only=True) == []
