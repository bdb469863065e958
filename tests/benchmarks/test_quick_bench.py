"""``python -m benchmarks --quick`` runs every benchmark and reports it (CI smoke test).

No figure is asserted on: timings depend on the machine. What must hold is
that the quick suite finishes, exits 0 (no benchmark raised), prints every
benchmark and every section it produces, and writes a results file in
which each section has measured samples.

This is CI's only run of the quick benchmarks: ``scripts/test.sh`` sets
``ARENA_QUICK_BENCH_RESULTS`` to where it wants the results file, and prints
its targets after pytest (``python -m benchmarks --show``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = ("capture", "latency", "responsiveness", "memory", "idle", "stop", "startup", "lint", "scale")
SECTIONS = (
    "capture",
    "ingest",
    "notify",
    "editor_latency",
    "server_latency",
    "responsiveness",
    "memory",
    "idle",
    "stop",
    "startup",
    "lint",
    "scale",
    "history",
    "checkpoints",
)


@pytest.mark.timeout(600)
def test_quick_mode_runs_every_benchmark(tmp_path: Path) -> None:
    results = Path(os.environ.get("ARENA_QUICK_BENCH_RESULTS") or tmp_path / "results.json")
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--output", str(results)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=560,
    )
    report = completed.stdout[-6000:] + "\n--- stderr ---\n" + completed.stderr[-6000:]
    assert completed.returncode == 0, report
    for name in BENCHMARKS:
        assert f"### benchmark {name} ..." in completed.stdout, report
    for section in SECTIONS:
        assert f"\n== {section}: " in completed.stdout, report

    data = json.loads(results.read_text())
    assert data["quick"] is True
    assert data["failed"] == []
    assert set(SECTIONS) <= set(data["sections"])
    for name, section in data["sections"].items():
        assert section["error"] is None, name
        assert section["figures"], name
        assert all(figure["samples"] for figure in section["figures"].values()), name
    assert data["targets"], "no figure carried a target"
    shown = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--show", str(results)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "=== targets" in shown.stdout
    assert all(f"{row['benchmark']}.{row['figure']}" in shown.stdout for row in data["targets"])
