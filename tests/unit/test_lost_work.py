"""``RunInfo.lost`` (``lifecycle/lostwork.py``): the work a stop or a kill lost, pure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_ls.lifecycle.lostwork import LostWork, lost_work
from arena_ls.lifecycle.runview import RunView
from arena_ls.protocol.wire import run_info
from arena_ls.run.rundir import CheckpointRecord, RunDir, RunSpec, RunState
from arena_ls.run.states import RunStatus


def state(**given: Any) -> RunState:
    fields: dict[str, Any] = {"run_id": "r", "job_id": "j", "status": RunStatus.STOPPED}
    fields.update(given)
    return RunState(**fields)


def spec() -> RunSpec:
    return RunSpec(run_id="r", job_id="j", job_name="J", kind="train", argv=["/py", "t.py"], cwd="/ws")


def checkpoint(step: int, at: float) -> CheckpointRecord:
    return CheckpointRecord(step=step, path="ckpt.pt", at=at)


def test_a_kill_past_the_last_checkpoint_loses_the_steps_and_the_time_since_it() -> None:
    killed = state(step=390, last_checkpoint=checkpoint(300, 1000.0), started_at=100.0, ended_at=1240.0)
    assert lost_work(killed, None) == LostWork(90, 240.0)


def test_a_stop_that_saved_a_checkpoint_loses_nothing() -> None:
    saved = state(step=634, last_checkpoint=checkpoint(634, 1000.0), started_at=100.0, ended_at=1010.0)
    assert lost_work(saved, None) == LostWork(0, 0.0)


def test_a_run_that_never_saved_loses_everything_since_its_start() -> None:
    assert lost_work(state(step=50, started_at=100.0, ended_at=160.0), None) == LostWork(50, 60.0)
    resumed = state(step=650, started_at=100.0, ended_at=160.0)
    assert lost_work(resumed, 600) == LostWork(50, 60.0), "counted from the step it resumed at"


def test_a_checkpoint_of_an_earlier_run_counts_from_this_runs_start() -> None:
    taken_over = state(step=700, last_checkpoint=checkpoint(600, 10.0), started_at=5000.0, ended_at=5030.0)
    assert lost_work(taken_over, 600) == LostWork(100, 30.0)


def test_a_signal_death_counts_and_other_ends_do_not() -> None:
    killed = state(status=RunStatus.CRASHED, signal="SIGKILL", step=5, started_at=0.0, ended_at=1.0)
    assert lost_work(killed, None) == LostWork(5, 1.0)
    assert lost_work(state(status=RunStatus.CRASHED, exit_code=1, step=5), None) is None
    assert lost_work(state(status=RunStatus.SUCCEEDED, step=5), None) is None
    assert lost_work(state(status=RunStatus.RUNNING, step=5), None) is None


def test_a_run_that_announced_no_step_lost_an_unknown_amount() -> None:
    assert lost_work(state(started_at=0.0, ended_at=9.0), None) is None


def test_a_stopped_runs_step_and_lost_agree_when_the_log_was_read_short_of_the_record(tmp_path: Path) -> None:
    """The agent wrote the end of a kill at step 172; the server had read the log to step 171
    (CI, beside its other tests: "killed at step 171; last checkpoint 6: 166 steps lost")."""
    view = RunView(RunDir(tmp_path / "r"), spec())
    view.state = state(
        step=172, last_checkpoint=checkpoint(6, 100.0), started_at=90.0, ended_at=160.0, signal=9
    )
    view.progress.update(171, None, None, None, at=150.0)
    info = run_info(view)
    assert info["step"] == 172 and info["lost"] == {"steps": 166, "seconds": 60.0}


def test_a_live_runs_step_is_the_one_read_from_the_log() -> None:
    """While it runs, the log is fresher than the agent's record; after a relaunch it is also
    lower (the run resumed from its checkpoint), and the record's older, higher step is not it."""
    for read, recorded in ((180, 172), (100, 172)):
        view = RunView(RunDir(Path("/nonexistent/r")), spec())
        view.state = state(status=RunStatus.RUNNING, step=recorded, last_checkpoint=checkpoint(6, 100.0))
        view.progress.update(read, None, None, None, at=150.0)
        assert run_info(view)["step"] == read
