"""Adoption off the event loop (issue 24): ``Supervisor.list_history`` lists the runs folder and
reads the runs to adopt on a worker thread; the scan after it, on the loop, only takes them.

Real run folders (written with the agent's writers), a real supervisor; the fake back end only
because no run here is started.
"""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from arena_ls.lifecycle.backends.base import Backends
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.run.outputlog import STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from arena_ls.settings import Settings
from tests.helpers.fake_backend import FakeBackend, Recorder, write_state

DEAD_PID = 2**22 + 17
"""No process has it (Linux's pids stop at 2**22)."""


def write_run(root: Path, lines: int, **state: object) -> RunDir:
    """A run of job ``quick`` as its agent leaves it: output lines, a state, the lock released."""
    lock = RunLock(StateFolder(root / ".aide" / "training"))

    def spec(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="quick", job_name="quick", kind="task",
                       argv=["python", "t.py"], cwd=str(root), created_at=time.time())  # fmt: skip

    run = lock.claim("quick", spec)
    writer = OutputWriter(run.path)
    writer.append(STDOUT, "".join(f"line {i}\n" for i in range(lines)).encode())
    writer.close()
    write_state(run, pid=DEAD_PID, agent_pid=DEAD_PID, started_at=time.time(), **state)
    lock.release(run.run_id)
    return run


@pytest.fixture
async def supervisor(tmp_path: Path) -> AsyncIterator[Supervisor]:
    found = Supervisor(
        tmp_path, lambda: Settings(), Recorder(), backends=Backends(FakeBackend(backend_name="local"))
    )
    try:
        yield found
    finally:
        await found.close()


def no_reading_here(run_dir: RunDir) -> None:
    raise AssertionError(f"run {run_dir.run_id} was read by the scan, not ahead of it")


async def test_the_scan_after_list_history_takes_the_runs_read_on_the_worker_thread(
    tmp_path: Path, supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor.scan()  # an empty history: nothing to adopt
    runs = [
        write_run(tmp_path, 30, status=RunStatus.SUCCEEDED, exit_code=0, ended_at=time.time())
        for _ in range(3)
    ]
    await asyncio.to_thread(supervisor.list_history)
    monkeypatch.setattr(supervisor, "_read_for_adoption", no_reading_here)
    monkeypatch.setattr(supervisor.history, "refresh", lambda *a, **k: pytest.fail("listed on the loop"))
    supervisor.scan(list_folder=False)
    assert set(supervisor.views) == {run.run_id for run in runs}
    for run in runs:
        view = supervisor.views[run.run_id]
        assert view.status is RunStatus.SUCCEEDED
        assert [line.text for line in view.ring][-1] == "line 29", "its log's tail, read ahead"


async def test_a_run_read_ahead_while_running_that_ends_before_the_scan_is_adopted_as_it_ended(
    tmp_path: Path, supervisor: Supervisor
) -> None:
    supervisor.scan()
    run = write_run(tmp_path, 5, status=RunStatus.RUNNING)  # its agent (a dead pid) is gone
    await asyncio.to_thread(supervisor.list_history)
    write_state(run, status=RunStatus.SUCCEEDED, exit_code=0, ended_at=time.time())  # its last write
    supervisor.scan(list_folder=False)
    view = supervisor.views[run.run_id]
    assert view.status is RunStatus.SUCCEEDED, "judged by its state now, never the one read ahead"
    assert run.read_state().status is RunStatus.SUCCEEDED, "no verdict written over its outcome"


async def test_a_scan_that_lists_takes_what_a_listing_ahead_did_not_see(
    tmp_path: Path, supervisor: Supervisor
) -> None:
    supervisor.scan()
    first = write_run(tmp_path, 2, status=RunStatus.SUCCEEDED, exit_code=0, ended_at=time.time())
    await asyncio.to_thread(supervisor.list_history)
    second = write_run(tmp_path, 2, status=RunStatus.SUCCEEDED, exit_code=0, ended_at=time.time())
    supervisor.scan(list_folder=False)
    assert set(supervisor.views) == {first.run_id}, "the listing ahead is the one taken"
    supervisor.scan()
    assert set(supervisor.views) == {first.run_id, second.run_id}


def test_a_view_read_for_one_answer_is_freed_without_the_garbage_collector(
    tmp_path: Path, supervisor: Supervisor
) -> None:
    """No cycle between a view and its records: a page of old runs leaves nothing for a full
    collection to walk (700 of them made one that held the event loop for 108-134 ms)."""
    run = write_run(tmp_path, 10, status=RunStatus.SUCCEEDED, exit_code=0, ended_at=time.time())
    gc.disable()
    try:
        view = supervisor.read_view(run.run_id)
        assert view is not None and view.status is RunStatus.SUCCEEDED
        view.start_live_at_tail()  # its records read too, as an adoption reads them
        gone = weakref.ref(view)
        del view
        assert gone() is None, "freed when its last reference went"
    finally:
        gc.enable()
