"""``arena start --follow`` of the reference job with ``runOn`` on the session's Ray head: the
same progress and the same Ctrl-C as locally (tests/client/test_cli.py), then a resume.

Settings come from ``$ARENA_SETTINGS`` (the terminal has no editor settings: docs/clusters.md).
"""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest

from tests.client.support import ArenaProcess
from tests.cluster.conftest import RayHead
from tests.cluster.support import CLUSTER, REFERENCE_LOG_EVERY, options, reference_workspace

JOB = "tiny-lm"
STEPS = 300
LONG = 180.0
"""A run on a loaded two-core machine with a Ray head beside it: generous deadlines."""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to one process is POSIX")
def test_arena_start_follows_the_reference_job_on_the_cluster_and_ctrl_c_twice_stops_it(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = reference_workspace(tmp_path / "ws", JOB, STEPS)
    settings = tmp_path / "arena-settings.json"
    settings.write_text(json.dumps(options(ray_head)))
    env = {"ARENA_SETTINGS": str(settings), "ARENA_STOP_WINDOW_SECONDS": "600"}

    arena = ArenaProcess(root, "start", JOB, "--follow", env=env)
    try:
        run_id = arena.run_id()
        arena.wait_for_line(rf"^started run \S+ of job {JOB} @ {CLUSTER} \(submission arena-")
        arena.wait_for_line(rf"^\[progress\] step \d+/{STEPS}", LONG)
        arena.wait_for_line(rf"^step {REFERENCE_LOG_EVERY}/{STEPS} loss", LONG)
        arena.process.send_signal(signal.SIGINT)
        arena.wait_for_line(r"^arena: detaching in 600 s")
        arena.process.send_signal(signal.SIGINT)
        arena.wait_for_line(rf"^arena: stopping: asked the trainer of run {run_id} to checkpoint and stop")
        assert arena.wait(LONG) == 0, arena.stderr
    finally:
        arena.close()
    saved = arena.wait_for_line(r"^stopped by SIGTERM at step (\d+)$")  # Ray's stop reached the trainer
    step = int(saved.group(1))
    assert arena.out[-2].startswith(f"run {run_id} stopped (by signal)"), arena.out[-3:]
    assert f"last checkpoint step {step}" in arena.out[-2], arena.out[-2]
    assert arena.out[-1] == f"stopped at step {step}; nothing lost (checkpoint at step {step})", arena.out[-1]

    again = ArenaProcess(root, "start", JOB, "--follow", env=env)
    try:
        assert again.wait(LONG) == 0, again.stdout[-2000:] + again.stderr
    finally:
        again.close()
    assert f"resuming from the checkpoint at step {step} " in again.stdout, again.stdout[:2000]
    assert re.search(rf"^resumed from \S+ at step {step}$", again.stdout, re.MULTILINE), again.stdout[:2000]
    summary = again.out[-1]
    assert summary.startswith("run ") and f"succeeded · exit code 0 · step {STEPS}/{STEPS}" in summary
