"""AR010 by device profile and ``gates.severity`` (contract 7.3): the pure policy, and the gate cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_ls.diagnostics import Diag, Span
from arena_ls.gates.cache import TrainerGates
from arena_ls.gates.severity import gate_severities, with_severities
from arena_ls.manifest import load_manifest_text
from arena_ls.settings import parse_settings

FIXTURES = Path(__file__).parent / "fixtures"


def test_ar010_is_an_error_on_windows_and_a_warning_elsewhere() -> None:
    assert gate_severities(True, {}) == {"AR010": "error"}
    assert gate_severities(False, {}) == {}


def test_the_workspace_setting_wins_over_the_device() -> None:
    assert gate_severities(True, {"AR010": "warning"}) == {"AR010": "warning"}
    assert gate_severities(False, {"AR011": "error", "AR012": "information"}) == {
        "AR011": "error",
        "AR012": "information",
    }


def test_only_the_tunable_gates_change() -> None:
    assert gate_severities(False, {"AR001": "information", "AR010": "loud"}) == {}
    diags = [Diag(code, "m", "warning", Span(0, 0, 0, 1)) for code in ("AR001", "AR010", "AR012")]
    changed = with_severities(diags, {"AR010": "error", "AR001": "information"})
    assert [d.severity for d in changed] == ["information", "error", "warning"]


@pytest.mark.parametrize(
    "value",
    [{"AR001": "error"}, {"AR010": "fatal"}, {"AR010": 1}, ["AR010"], "error", {"ar010": "error"}],
)
def test_the_setting_refuses_what_it_cannot_set(value: object) -> None:
    settings, problems = parse_settings({"gates": {"severity": value}})
    assert problems and "gates.severity" in problems[0] and dict(settings.gates_severity) == {}


def test_the_gate_cache_applies_them_and_a_change_is_not_served_stale(tmp_path: Path) -> None:
    trainer = tmp_path / "train.py"
    trainer.write_text((FIXTURES / "ar010" / "fires_literal.py").read_text())
    text = (
        '{"version": 1, "jobs": [{"id": "t", "kind": "train", "command": "{python}", "args": ["train.py"],'
        ' "resume": {"args": ["{step}"]}}]}'
    )
    manifest = load_manifest_text(text, tmp_path / "m.json", tmp_path)
    chosen: dict[str, str] = {}
    gates = TrainerGates(tmp_path, lambda: manifest, lambda: True, lambda: dict(chosen))  # type: ignore[arg-type]
    job = manifest.jobs["t"]
    assert "AR010" not in {d.code for d in gates.errors(job)}
    assert {d.severity for d in gates.lint_file(str(trainer)) if d.code == "AR010"} == {"warning"}
    chosen.update(gate_severities(True, {}))
    assert "AR010" in {d.code for d in gates.errors(job)}
    chosen.update(gate_severities(True, {"AR010": "information"}))
    assert "AR010" not in {d.code for d in gates.errors(job)}
    assert {d.severity for d in gates.lint_file(str(trainer)) if d.code == "AR010"} == {"information"}
