"""The agent's stop protocol on the Windows branch, in a real run on Linux.

A ``sitecustomize`` on the agent's ``PYTHONPATH`` makes
``platform.cooperative_signal_name`` answer as on Windows (None). A trainer
whose job asks for ``stop.method: signal`` then gets the stop file and no
signal: the fake trainer, which would take a SIGTERM as a stop too, is
stopped by the file, and the run's log says that no signal was sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.rundir import RunDir
from tests.helpers.waiting import wait_until
from tests.lifecycle.test_launch import FAKE_TRAINER, write_run

SITECUSTOMIZE = """
import os
if os.environ.get("ARENA_TEST_WINDOWS_STOP"):
    import arena_ls.platform
    arena_ls.platform.cooperative_signal_name = lambda: None
"""


@pytest.mark.parametrize("method", ["signal", "both"])
def test_the_signal_stage_sends_nothing_and_creates_the_stop_file(tmp_path: Path, method: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    run_path = write_run(
        tmp_path,
        [sys.executable, str(FAKE_TRAINER), "--steps", "100000", "--interval", "0.05", "--ckpt-every", "2"],
        kind="task",
        stop_method=method,
        grace_seconds=60.0,
    )
    pythonpath = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": pythonpath, "ARENA_TEST_WINDOWS_STOP": "1"}
    agent = subprocess.Popen([sys.executable, "-m", "arena_ls.agent.launch", str(run_path)], env=env)
    try:
        run = RunDir(run_path)
        announced = lambda: any('"checkpoint"' in line.text for line in iter_all_lines(run_path))  # noqa: E731
        wait_until(announced, "a checkpoint announced")
        run.request_stop(kill=False, grace_seconds=60, by="test")
        assert agent.wait(timeout=90) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
    state = json.loads((run_path / "state.json").read_text())
    texts = [line.text for line in iter_all_lines(run_path)]
    assert state["status"] == "stopped" and state["stoppedBy"] == "file" and state["exitCode"] == 0, texts
    assert (run_path / "STOP").exists()
    assert any(text.startswith("no stop signal on this system") for text in texts)
    assert not any(text.startswith("sent the stop signal") for text in texts)
    assert "stopping cooperatively" in texts
