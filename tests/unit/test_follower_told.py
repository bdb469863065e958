"""The statuses a run passed through that no reading caught, rebuilt where the follower keeps what
it told (``lifecycle/follower_told.py``); the server only forwards them (``tests/protocol/
test_announcements.py`` has the ``arena/statusChanged`` sequences)."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_ls.lifecycle import follower_told
from arena_ls.lifecycle.follower_told import StatusesTold
from arena_ls.lifecycle.runview import RunView
from arena_ls.run.rundir import RunDir, RunSpec, RunState
from arena_ls.run.states import RunStatus as R


class Run:
    """A view of one run whose state the test sets (``RunView`` reads it from its folder)."""

    def __init__(self, tmp_path: Path, run_id: str = "r1") -> None:
        spec = RunSpec(run_id=run_id, job_id="quick", job_name="Quick", kind="train", argv=["x"], cwd=".")
        self.view = RunView(RunDir(tmp_path / run_id), spec)

    def now(self, status: R, restarts: int = 0, stopped_by: str | None = None) -> RunView:
        state = RunState(run_id=self.view.run_id, job_id="quick", status=status, restarts=restarts)
        state.stopped_by = stopped_by
        self.view.state = state
        return self.view


def test_a_run_told_for_the_first_time_missed_nothing(tmp_path: Path) -> None:
    told = StatusesTold(lambda run_id: True)
    assert told.missed_since_told(Run(tmp_path).now(R.STOPPED)) == []


def test_a_quick_stop_is_rebuilt_stopping_and_told_once(tmp_path: Path) -> None:
    told, run = StatusesTold(lambda run_id: True), Run(tmp_path)
    told.missed_since_told(run.now(R.RUNNING))
    assert told.missed_since_told(run.now(R.STOPPED)) == [(R.STOPPING, 0)]
    assert told.missed_since_told(run.now(R.STOPPED)) == [], "nothing rebuilt twice"


def test_a_relaunch_no_reading_caught_is_rebuilt_with_its_restart_counted(tmp_path: Path) -> None:
    """``running``, then ``running`` again with ``restarts`` one higher: the ``restarting`` between."""
    told, run = StatusesTold(lambda run_id: True), Run(tmp_path)
    told.missed_since_told(run.now(R.RUNNING))
    assert told.missed_since_told(run.now(R.RUNNING, restarts=1)) == [(R.RESTARTING, 1)]
    assert told.missed_since_told(run.now(R.RUNNING, restarts=3)) == [
        (R.RESTARTING, 2),
        (R.RUNNING, 2),
        (R.RESTARTING, 3),
    ]


def test_a_battery_pause_passes_stopping_and_a_crash_relaunch_does_not(tmp_path: Path) -> None:
    told, battery, crash = StatusesTold(lambda run_id: True), Run(tmp_path, "b"), Run(tmp_path, "c")
    told.missed_since_told(battery.now(R.RUNNING))
    assert told.missed_since_told(battery.now(R.RESTARTING, stopped_by="battery")) == [(R.STOPPING, 0)]
    told.missed_since_told(crash.now(R.RUNNING))
    assert told.missed_since_told(crash.now(R.RESTARTING, restarts=1)) == []


def test_runs_no_longer_followed_are_forgotten_past_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(follower_told, "ANNOUNCED_KEPT", 2)
    told = StatusesTold(lambda run_id: run_id == "kept")
    told.remember("old-1", (R.SUCCEEDED, 0))
    told.remember("kept", (R.RUNNING, 0))
    assert set(told.told) == {"old-1", "kept"}, "within the bound, nothing is forgotten"
    told.remember("old-2", (R.SUCCEEDED, 0))
    assert set(told.told) == {"kept"}
