"""The one picture we show users: ``arena plot`` of the reference job (training/train.py),
shortened, after a cooperative stop, a resume and a relaunch of a killed trainer.

The marks on the picture must be the runs' real history: one resume mark per run
that resumed (``resumedFromStep``), one relaunch mark per relaunch the watchdog
made (``restarts``), and none for a trainer that announces each step twice (the
reference prints ``step N/…`` and ``@arena {"event": "progress", …}``). Set
``ARENA_KEEP_PLOT=DIR`` to keep the PNG for a look.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.client.support import (
    ArenaProcess,
    run_arena,
    status_json,
    stop_every_run,
    wait_until_no_run_is_active,
)

REPO = Path(__file__).resolve().parents[2]
STEPS = 200
CKPT_EVERY = 20
LONG = 300.0
"""Deadline for a real PyTorch run on a loaded machine."""


def reference_workspace(root: Path) -> Path:
    """A copy of the repository's training folder whose tiny-lm is shortened to ``STEPS``."""
    ignore = shutil.ignore_patterns("__pycache__", "checkpoints", ".aide")
    shutil.copytree(REPO / "training", root / "training", ignore=ignore)
    manifest = json.loads((root / "training" / "manifest.json").read_text())
    tiny = next(j for j in manifest["jobs"] if j["id"] == "tiny-lm")
    tiny["args"] = [
        "training/train.py",
        "--steps",
        str(STEPS),
        "--ckpt-every",
        str(CKPT_EVERY),
        "--eval-every",
        "40",
    ]
    tiny["restart"] = {"maxRestarts": 3, "backoffSeconds": 1}
    (root / "training" / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


def tiny_runs(root: Path) -> list[dict[str, Any]]:
    return [r for r in status_json(root)["runs"] if r["jobId"] == "tiny-lm"]


def stop_after_a_checkpoint(root: Path) -> None:
    """A fresh run, stopped cooperatively once it saved its second checkpoint."""
    first = ArenaProcess(root, "start", "tiny-lm", "--fresh", "--follow")
    try:
        first.wait_for_line(rf"saved checkpoint step={2 * CKPT_EVERY}\b", timeout=LONG)
        stopped = run_arena(root, "stop", "tiny-lm", timeout=LONG)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        first.wait(LONG)
    finally:
        first.close()


def resume_kill_and_finish(root: Path) -> None:
    """Resume; once the resumed trainer saved a checkpoint, kill -9 it; the watchdog relaunches
    it from that checkpoint and the run trains to its last step."""
    second = ArenaProcess(root, "start", "tiny-lm", "--follow")
    try:
        second.wait_for_line(r"resuming from the checkpoint at step \d+", timeout=LONG)
        second.wait_for_line(r"saved checkpoint step=\d+", timeout=LONG)
        active = status_json(root)["active"]
        assert active is not None and active["jobId"] == "tiny-lm", active
        os.kill(int(active["pid"]), signal.SIGKILL)
        second.wait_for_line(r"restarting from step \d+", timeout=LONG)
        assert second.wait(LONG) == 0, second.stdout[-3000:] + second.stderr
    finally:
        second.close()


@pytest.mark.timeout(900)
def test_the_reference_plot_marks_only_the_real_resume_and_relaunch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib", reason="arena plot needs the extra `plot` (matplotlib)")
    root = reference_workspace(tmp_path / "ws")
    try:
        stop_after_a_checkpoint(root)
        resume_kill_and_finish(root)
        wait_until_no_run_is_active(root, "the run to end", timeout=LONG)
        plotted = run_arena(root, "plot", "tiny-lm", timeout=LONG)
    finally:
        stop_every_run(root)
    assert plotted.returncode == 0, plotted.stdout + plotted.stderr
    runs = tiny_runs(root)
    assert [r["status"] for r in runs] == ["stopped", "succeeded"], runs
    resumed = len([r for r in runs[1:] if isinstance(r.get("resumedFromStep"), int)])
    relaunched = sum(int(r.get("restarts") or 0) for r in runs)
    assert (resumed, relaunched) == (1, 1), "the history this test makes"
    summary = re.search(r"\((\d+) resumes?, (\d+) relaunch(?:es)?, (\d+) checkpoints?", plotted.stdout)
    assert summary, plotted.stdout
    assert (int(summary.group(1)), int(summary.group(2))) == (resumed, relaunched), plotted.stdout
    assert int(summary.group(3)) >= STEPS // CKPT_EVERY
    out = Path(re.search(r"wrote (\S+)", plotted.stdout).group(1))  # type: ignore[union-attr]
    assert out == (root / ".aide" / "plots" / "tiny-lm-loss.png").resolve()
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out.parent / ".gitignore").read_text().splitlines()[-1] == "*", "git never shows the plot"
    keep = os.environ.get("ARENA_KEEP_PLOT")
    if keep:
        shutil.copy(out, Path(keep) / out.name)
