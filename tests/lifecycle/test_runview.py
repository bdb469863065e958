"""A server's view of one run and the one follower of a server's runs, on real files, no process started."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.lifecycle import follower as follower_module
from arena_ls.lifecycle.follower import RunFollower
from arena_ls.lifecycle.runview import BACKLOG_JUMP_BYTES, RING_LINES, RunView
from arena_ls.run.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunSpec, RunState
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.helpers.fake_backend import Recorder, write_state

WAIT = 20.0


@pytest.fixture
def folder(tmp_path: Path) -> StateFolder:
    return StateFolder(tmp_path / ".aide" / "training")


@pytest.fixture
def run(folder: StateFolder) -> RunDir:
    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="job", job_name="Job", kind="train", argv=["x"], cwd=".")

    return RunLock(folder).claim("job", build)


def view_of(run: RunDir) -> RunView:
    return RunView(run, run.read_spec())


def write_live_state(run: RunDir, **fields: Any) -> None:
    """A state whose agent lives (this test's process), so no liveness check finds the run lost."""
    me = os.getpid()
    write_state(run, agent_pid=me, agent_create_time=platform.process_identity(me), **fields)


def write_lines(run: RunDir, *texts: str) -> None:
    writer = OutputWriter(run.path)
    writer.append(STDOUT, "".join(f"{text}\n" for text in texts).encode())
    writer.close()


# -- state -----------------------------------------------------------------------------------------


def test_a_run_without_a_state_is_starting(run: RunDir) -> None:
    view = view_of(run)
    view.refresh_state()
    assert view.state is None and view.status is RunStatus.STARTING and not view.is_final


def test_every_new_state_is_seen_and_the_snapshot_changes_with_it(run: RunDir) -> None:
    view = view_of(run)
    write_state(run, status=RunStatus.RUNNING, pid=10)
    view.refresh_state()
    running = view.snapshot()
    assert view.status is RunStatus.RUNNING
    write_state(run, status=RunStatus.SUCCEEDED, exit_code=0)
    view.refresh_state()
    assert view.status is RunStatus.SUCCEEDED and view.is_final
    assert view.snapshot() != running


def test_a_damaged_state_of_a_run_never_read_is_damage_until_rewritten_whole(run: RunDir) -> None:
    run.state_path.write_text("{half a state")
    view = view_of(run)
    view.refresh_state()
    assert view.damage is not None and view.damage.startswith("state.json")
    assert view.status is RunStatus.LOST
    run.write_state(RunState(run_id=run.run_id, job_id="job", status=RunStatus.RUNNING))
    view.retry_damaged()
    assert view.damage is None and view.status is RunStatus.RUNNING


def test_a_damaged_state_after_a_good_one_keeps_the_good_one(run: RunDir) -> None:
    view = view_of(run)
    write_state(run, status=RunStatus.RUNNING)
    view.refresh_state()
    run.state_path.write_text("{half a state")
    view.refresh_state()
    assert view.damage is None and view.problem is not None
    assert view.status is RunStatus.RUNNING


# -- lines -----------------------------------------------------------------------------------------


def test_new_lines_are_read_once_each_in_order(run: RunDir) -> None:
    view = view_of(run)
    write_lines(run, "one", "two")
    assert [line.text for line in view.read_new_lines()] == ["one", "two"]
    assert view.read_new_lines() == []
    write_lines(run, "three")
    lines = view.read_new_lines()
    assert [(line.seq, line.text) for line in lines] == [(2, "three")]
    assert [line.text for line in view.ring] == ["one", "two", "three"]


def test_lines_read_without_notice_still_advance_and_feed_progress(run: RunDir) -> None:
    view = view_of(run)
    write_lines(run, "step 10/100 loss 2.5")
    assert view.read_new_lines(notify=False) == []
    assert view.read_new_lines() == []
    assert (view.progress.step, view.progress.total, view.progress.loss) == (10, 100, 2.5)


def test_a_flood_jumps_the_live_view_to_the_tail_and_counts_what_it_skipped(run: RunDir) -> None:
    view = view_of(run)
    line = "x" * 1000
    count = BACKLOG_JUMP_BYTES // 1000 + 500
    write_lines(run, *(f"{i} {line}" for i in range(count)))
    lines = view.read_new_lines()
    assert lines[-1].seq == count - 1, "the live view reaches the end"
    skipped = view.take_unsummarised()
    assert skipped > 0 and skipped + len(lines) == count, "every line is either read or counted"
    assert view.take_unsummarised() == 0


def test_adopting_fills_the_ring_with_the_last_lines_and_follows_from_there(run: RunDir) -> None:
    write_lines(run, *(f"line {i}" for i in range(RING_LINES + 10)))
    view = view_of(run)
    view.start_live_at_tail()
    assert len(view.ring) == RING_LINES
    assert view.ring[-1].text == f"line {RING_LINES + 9}"
    assert view.read_new_lines() == []


# -- liveness --------------------------------------------------------------------------------------


def test_a_run_whose_agent_never_wrote_a_state_is_given_time(run: RunDir, folder: StateFolder) -> None:
    view = view_of(run)
    assert view.check_lost(folder) is False
    assert view.status is RunStatus.STARTING


def test_a_run_whose_local_agent_is_gone_is_recorded_lost_and_unlocked(
    run: RunDir, folder: StateFolder
) -> None:
    write_state(run, status=RunStatus.RUNNING, agent_pid=2**22 + 17, agent_create_time=1.0)
    view = view_of(run)
    view.refresh_state()
    assert view.check_lost(folder) is True
    state = run.read_state()
    assert state.status is RunStatus.LOST
    assert state.failure is not None and state.failure.evidence == (
        "the job agent is gone and recorded no exit status"
    )
    assert RunLock(folder).holder() is None
    assert view.check_lost(folder) is False, "a final run is never judged again"


def test_a_final_state_written_as_the_agent_exited_wins_over_lost(run: RunDir, folder: StateFolder) -> None:
    write_state(run, status=RunStatus.RUNNING, agent_pid=2**22 + 17, agent_create_time=1.0)
    view = view_of(run)
    view.refresh_state()
    write_state(run, status=RunStatus.SUCCEEDED)
    assert view.check_lost(folder) is False
    assert view.status is RunStatus.SUCCEEDED


# -- the follower ----------------------------------------------------------------------------------


class Runs:
    """``FollowedRuns`` for a follower alone (the supervisor's part, minimal)."""

    def __init__(self, folder: StateFolder, *views: RunView) -> None:
        self.views = {view.run_id: view for view in views}
        self._folder = folder
        self.damage_reports: list[str] = []
        self.idle_rounds = 0

    @property
    def folder(self) -> StateFolder:
        return self._folder

    def scan(self, *, list_folder: bool = True) -> None: ...

    def list_history(self) -> None: ...

    def retry_damaged(self, view: RunView) -> None:
        view.retry_damaged()

    def check_lost(self, view: RunView) -> bool:
        return view.check_lost(self.folder)

    def report_damage(self, view: RunView) -> None:
        if view.damage is not None:
            self.damage_reports.append(view.run_id)

    def idle(self) -> None:
        self.idle_rounds += 1

    def busy(self) -> None: ...


@pytest.fixture
async def follower(run: RunDir, folder: StateFolder) -> Any:
    recorder = Recorder()
    follower = RunFollower(Runs(folder, view_of(run)), recorder)
    yield follower, recorder
    await follower.close()


async def test_each_change_is_announced_once_whoever_reads_it(follower: Any, run: RunDir) -> None:
    follower, recorder = follower
    view = follower.runs.views[run.run_id]
    write_live_state(run, status=RunStatus.RUNNING)
    follower.poll_once()
    view.refresh_state()
    follower.notify_if_changed(view)
    follower.poll_once()
    assert recorder.changes == [(run.run_id, "running")]


async def test_lines_and_the_follower_s_own_lines_reach_the_listener(follower: Any, run: RunDir) -> None:
    follower, recorder = follower
    writer = OutputWriter(run.path)
    writer.append(STDOUT, b"hello\n")
    writer.append_line(ARENA, "restarting from step 5 (attempt 1/3) in 5s")
    writer.close()
    assert follower.poll_once() is True
    assert recorder.lines == ["hello", "restarting from step 5 (attempt 1/3) in 5s"]
    assert recorder.lifecycle_lines == ["restarting from step 5 (attempt 1/3) in 5s"]


async def test_a_waiter_is_told_when_its_condition_holds(follower: Any, run: RunDir) -> None:
    follower, recorder = follower
    view = follower.runs.views[run.run_id]
    waiting = asyncio.create_task(follower.until(view, lambda v: v.is_final, WAIT))
    write_live_state(run, status=RunStatus.RUNNING)
    write_state(run, status=RunStatus.STOPPED)
    assert await asyncio.wait_for(waiting, WAIT) is True
    assert (run.run_id, "stopped") in recorder.changes, "what the waiter saw was announced too"


async def test_a_condition_that_already_holds_needs_no_follower(follower: Any, run: RunDir) -> None:
    follower, _ = follower
    view = follower.runs.views[run.run_id]
    assert await follower.until(view, lambda v: True, 0) is True
    assert follower._task is None


async def test_a_wait_that_times_out_says_so_and_leaves_no_waiter(follower: Any, run: RunDir) -> None:
    follower, _ = follower
    view = follower.runs.views[run.run_id]
    assert await follower.until(view, lambda v: v.is_final, 0.05) is False
    assert follower._waiters == []


async def test_a_failing_condition_reaches_its_waiter_and_the_follower_goes_on(
    follower: Any, run: RunDir
) -> None:
    follower, _ = follower
    view = follower.runs.views[run.run_id]

    def broken(_: RunView) -> bool:
        raise RuntimeError("a broken condition")

    with pytest.raises(RuntimeError, match="a broken condition"):
        await follower.until(view, broken, WAIT)
    write_state(run, status=RunStatus.SUCCEEDED)
    assert await follower.until(view, lambda v: v.is_final, WAIT) is True


async def test_a_run_deleted_by_hand_is_forgotten(follower: Any, run: RunDir) -> None:
    follower, _ = follower
    shutil.rmtree(run.path)
    follower.poll_once()
    assert follower.runs.views == {}


async def test_one_unreadable_run_never_stops_the_following_of_the_others(
    follower: Any, run: RunDir, folder: StateFolder, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower, recorder = follower
    other = RunDir(folder.runs_dir / "other-run")
    other.path.mkdir()
    other.write_spec(RunSpec(run_id="other-run", job_id="job", job_name="Job", kind="task", argv=[], cwd="."))
    broken = view_of(other)
    follower.runs.views[broken.run_id] = broken

    def unreadable(**_: Any) -> None:
        raise OSError("an unreadable disk")

    monkeypatch.setattr(broken, "refresh_state", unreadable)
    write_live_state(run, status=RunStatus.RUNNING)
    follower.poll_once()
    assert broken.damage == "its files cannot be read: an unreadable disk"
    assert follower.runs.damage_reports == ["other-run"]
    assert (run.run_id, "running") in recorder.changes


def test_a_state_for_another_follower_is_read_like_any(run: RunDir) -> None:
    """The view needs nothing but the files: a state any follower wrote is read the same way."""
    state = RunState(run_id=run.run_id, job_id="job", status=RunStatus.RUNNING, pid=3, restarts=2)
    run.write_state(state)
    view = view_of(run)
    view.refresh_state()
    assert view.state is not None and (view.state.pid, view.state.restarts) == (3, 2)


async def test_a_waiter_chooses_how_long_the_follower_may_pause_between_reads(
    follower: Any, run: RunDir
) -> None:
    follower, _ = follower
    view = follower.runs.views[run.run_id]
    looks = 0

    def after_six_looks(_: RunView) -> bool:
        nonlocal looks
        looks += 1
        return looks >= 6

    assert await follower.until(view, after_six_looks, WAIT, most=0.01) is True
    assert follower._hurry == pytest.approx(0.01), "the pauses doubled from 5 ms up to the waiter's most"


async def test_closing_the_follower_cancels_whoever_still_waits(follower: Any, run: RunDir) -> None:
    follower, _ = follower
    view = follower.runs.views[run.run_id]
    waiting = asyncio.create_task(follower.until(view, lambda v: v.is_final))
    for _ in range(1000):  # until() registers its waiter at its first step
        if follower._waiters:
            break
        await asyncio.sleep(0)
    assert follower._waiters, "the waiter was registered"
    await follower.close()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, WAIT)
    assert follower._waiters == []


async def test_close_ends_the_follower_when_a_wake_comes_with_the_cancellation(
    follower: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python 3.11's ``wait_for`` swallows a cancellation that comes as its inner wait completes:
    a close right after a wake (a request in flight, a TCP client that left) waited forever.

    That race depends on the order of two callbacks in one turn of the loop, so the test makes it
    certain: the follower's ``wait_for`` swallows every cancellation, as 3.11's does in the race.
    The loop must still end (it ends by ``_closed``), and a close that cannot end must not claim
    it did: ``wait_for(close(), WAIT)`` raises rather than returning (it returned after 20 s when
    ``close`` swallowed its own cancellation, so a follower that never ended passed)."""
    real_wait_for = asyncio.wait_for

    async def swallowing_wait_for(awaitable: Any, timeout: float | None) -> Any:
        try:
            return await real_wait_for(awaitable, timeout)
        except asyncio.CancelledError:
            return None

    monkeypatch.setattr(
        follower_module, "asyncio", SimpleNamespace(**{**vars(asyncio), "wait_for": swallowing_wait_for})
    )
    follower, _ = follower
    follower.ensure_running()
    deadline = time.monotonic() + WAIT
    while follower._full_due == 0.0:  # set once the first round (on a worker thread) is done
        assert time.monotonic() < deadline, "the follower's first round never ended"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0)  # it went on to its wait for a wake, with no await between
    follower.wake()
    await asyncio.wait_for(follower.close(), WAIT)
    follower.ensure_running()
    assert follower._task.done(), "a closed follower is never started again"
