"""The run back-end seam: the supervisor driven through a fake back end, with no process started.

The fake plays a back end and its agent: the test writes the run's
``state.json`` and output as an agent would, and the supervisor must see
the run only through the back end's methods and the run's files.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.errors import LAUNCH_FAILED, ArenaError
from arena_ls.lifecycle.backends.base import LOCAL, Backends, RunBackend, UnknownBackend
from arena_ls.lifecycle.backends.local import LocalBackend
from arena_ls.lifecycle.starter import StartRequest
from arena_ls.lifecycle.stopper import StopRequest
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.protocol.wire import run_info
from arena_ls.run.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunSpec, RunState
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from arena_ls.settings import Settings
from tests.helpers.fake_backend import FakeAgent, FakeBackend, Recorder, write_state
from tests.helpers.lsp import job, make_workspace

WAIT = 20.0
"""Every wait in this file ends at the event; this only bounds a broken one."""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def supervisor_with(root: Path, listener: Recorder, *backends: RunBackend) -> Supervisor:
    default, *others = backends
    return Supervisor(root, lambda: Settings(), listener, backends=Backends(default, *others))


@pytest.fixture
async def closing() -> Any:
    opened: list[Supervisor] = []
    yield opened.append
    for supervisor in opened:
        await supervisor.close()


async def launched(supervisor: Supervisor, backend: FakeBackend) -> tuple[asyncio.Task[Any], RunDir]:
    """Ask for a start and wait until the back end holds the run; the answer still waits for its pid."""
    starting = asyncio.create_task(supervisor.start(StartRequest(id="quick")))
    await asyncio.wait_for(backend.start_seen.wait(), WAIT)
    return starting, backend.started[0]


async def running(supervisor: Supervisor, backend: FakeBackend) -> RunDir:
    """A started run whose trainer the agent has recorded: the start has answered."""
    starting, run = await launched(supervisor, backend)
    write_state(run, status=RunStatus.RUNNING, pid=12345)
    await asyncio.wait_for(starting, WAIT)
    return run


def dead_pid() -> tuple[int, float]:
    """A pid and creation time that name no living process."""
    return 2**22 + 17, 1.0


def adopted_run(root: Path, backend: str, status: RunStatus, **fields: Any) -> RunDir:
    """A run folder left by an earlier server: spec, lock and the state its agent wrote."""
    folder = StateFolder(root / ".aide" / "training")

    def build(run_id: str) -> RunSpec:
        return RunSpec(
            run_id=run_id, job_id="quick", job_name="Quick", kind="task", argv=["x"], cwd=".", backend=backend
        )

    run = RunLock(folder).claim("quick", build)
    pid, created = dead_pid()
    write_state(run, status=status, agent_pid=pid, agent_create_time=created, **fields)
    return run


# -- start, follow, stop -----------------------------------------------------------------------


async def test_a_start_goes_through_the_chosen_back_end_and_answers_once_the_trainer_is_known(
    workspace: Path, recorder: Recorder, closing: Any
) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, recorder, backend)
    closing(supervisor)
    starting, run = await launched(supervisor, backend)
    assert run.read_spec().backend == "fake", "the run's folder records its back end"
    assert not starting.done(), "the answer waits for the trainer's pid"
    write_state(run, status=RunStatus.RUNNING, pid=12345)
    info = run_info(await asyncio.wait_for(starting, WAIT))
    assert (info["status"], info["pid"], info["agentPid"]) == ("running", 12345, backend.agents[0].pid)
    assert (run.run_id, "running") in recorder.changes
    assert supervisor.our_pids() == {12345}, "our pids come from the back end"


async def test_the_default_back_end_prepares_while_idle_only_and_is_released_at_close(
    workspace: Path, recorder: Recorder
) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, recorder, backend)
    assert supervisor.poll_once() is False
    assert backend.prepared == [supervisor.root], "an idle round prepares the next start"
    run = await running(supervisor, backend)
    prepared = len(backend.prepared)
    assert supervisor.poll_once() is True
    assert len(backend.prepared) == prepared, "nothing is prepared while a run is active"
    write_state(run, status=RunStatus.SUCCEEDED, pid=12345, exit_code=0)
    backend.agents[0].exit_code = 0
    supervisor.poll_once()  # the round that reads the final state still counts the run
    assert len(backend.prepared) == prepared
    assert supervisor.poll_once() is False
    assert len(backend.prepared) == prepared + 1, "the next start is prepared once the run is over"
    await supervisor.close()
    assert backend.released == 1


async def test_a_stop_is_asked_of_the_back_end_and_answers_at_the_final_status(
    workspace: Path, recorder: Recorder, closing: Any
) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, recorder, backend)
    closing(supervisor)
    run = await running(supervisor, backend)
    stopping = asyncio.create_task(supervisor.stop(StopRequest(id="quick", grace_seconds=7.0)))
    await asyncio.wait_for(backend.stop_seen.wait(), WAIT)
    assert backend.stops == [{"run": run.run_id, "kill": False, "grace": 7.0}]
    assert not (run.path / "stop.json").exists(), "the back end, not the supervisor, carries the stop"
    writer = OutputWriter(run.path)
    writer.append(STDOUT, b"saving and leaving\n")
    writer.append_line(ARENA, "stopped (by file)")
    writer.close()
    write_state(run, status=RunStatus.STOPPED, stopped_by="file")
    info = run_info(await asyncio.wait_for(stopping, WAIT))
    assert (info["status"], info["stoppedBy"]) == ("stopped", "file")
    assert "saving and leaving" in recorder.lines, "the run's last lines are told before the answer"
    assert "stopped (by file)" in recorder.lifecycle_lines
    assert recorder.changes.count((run.run_id, "stopped")) == 1


async def test_a_follower_that_fails_before_recording_a_trainer_fails_the_start(
    workspace: Path, recorder: Recorder, closing: Any
) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, recorder, backend)
    closing(supervisor)
    starting, run = await launched(supervisor, backend)
    backend.agents[0].exit_code = 99  # what this back end calls a failed start
    with pytest.raises(ArenaError) as failed:
        await asyncio.wait_for(starting, WAIT)
    assert failed.value.code == LAUNCH_FAILED[0]
    assert run.read_state().status is RunStatus.LOST
    assert RunLock(supervisor.folder).holder() is None


async def test_a_back_end_that_cannot_start_leaves_nothing_behind(
    workspace: Path, recorder: Recorder, closing: Any
) -> None:
    backend = FakeBackend(start_error=OSError("no room at the inn"))
    supervisor = supervisor_with(workspace, recorder, backend)
    closing(supervisor)
    with pytest.raises(ArenaError, match="no room at the inn") as failed:
        await supervisor.start(StartRequest(id="quick"))
    assert failed.value.code == LAUNCH_FAILED[0]
    assert supervisor.folder.list_runs() == []
    assert RunLock(supervisor.folder).holder() is None


# -- re-adoption: any server, after a restart ------------------------------------------------------


def test_a_run_is_followed_through_the_back_end_its_folder_records(workspace: Path) -> None:
    run = adopted_run(workspace, "fake", RunStatus.RUNNING, pid=777)
    fake = FakeBackend()
    supervisor = supervisor_with(workspace, Recorder(), LocalBackend(), fake)
    supervisor.scan()
    view = supervisor.views[run.run_id]
    assert view.backend is fake
    assert view.status is RunStatus.RUNNING
    assert supervisor.our_pids() == {777}


def test_a_run_outliving_its_agent_is_revived_by_one_server_only(workspace: Path) -> None:
    run = adopted_run(workspace, "fake", RunStatus.RUNNING)
    first, second = FakeBackend(can_revive=True, alive=False), FakeBackend(can_revive=True, alive=False)
    one = supervisor_with(workspace, Recorder(), LocalBackend(), first)
    other = supervisor_with(workspace, Recorder(), LocalBackend(), second)
    one.scan()
    other.scan()
    assert (first.revived, second.revived) == ([run.run_id], []), "one new agent per dead one"
    for supervisor in (one, other):
        assert supervisor.views[run.run_id].status is RunStatus.RUNNING
    assert one.views[run.run_id].agent is not None, "the reviving server holds its new agent"
    assert RunLock(one.folder).holder() == run.run_id
    assert first.ended == second.ended == []


def test_a_run_that_cannot_outlive_its_agent_is_recorded_lost_once(workspace: Path) -> None:
    run = adopted_run(workspace, "fake", RunStatus.RUNNING, pid=777)
    first, second = FakeBackend(alive=False), FakeBackend(alive=False)
    one = supervisor_with(workspace, Recorder(), LocalBackend(), first)
    other = supervisor_with(workspace, Recorder(), LocalBackend(), second)
    one.scan()
    other.scan()
    state = run.read_state()
    assert state.status is RunStatus.LOST
    assert state.failure is not None
    assert state.failure.evidence.endswith("; the fake trainer was ended")
    assert first.ended + second.ended == [run.run_id], "one server makes the verdict"
    assert first.revived == second.revived == []
    assert RunLock(one.folder).holder() is None


def test_a_run_whose_back_end_this_server_lacks_keeps_its_recorded_status(workspace: Path) -> None:
    run = adopted_run(workspace, "ray", RunStatus.RUNNING, pid=777)
    supervisor = supervisor_with(workspace, Recorder(), LocalBackend())
    supervisor.scan()
    supervisor.poll_once()
    view = supervisor.views[run.run_id]
    assert isinstance(view.backend, UnknownBackend) and view.backend.name == "ray"
    assert view.status is RunStatus.RUNNING, "never judged lost for a missing back end"
    assert run.read_state().status is RunStatus.RUNNING
    assert supervisor.our_pids() == set(), "nothing of it runs here as far as this server knows"


def test_an_old_run_folder_without_a_recorded_back_end_is_local(workspace: Path) -> None:
    run = adopted_run(workspace, LOCAL, RunStatus.SUCCEEDED)
    payload = (run.spec_path).read_text()
    run.spec_path.write_text(payload.replace('"backend": "local"', '"_": 0'))
    supervisor = supervisor_with(workspace, Recorder(), LocalBackend())
    supervisor.scan()
    assert supervisor.views[run.run_id].backend.name == LOCAL


# -- the local back end ----------------------------------------------------------------------------


@pytest.fixture
def local_state(tmp_path: Path) -> Iterator[RunState]:
    state = RunState(run_id="r", job_id="j", status=RunStatus.RUNNING)
    state.pid, state.pid_create_time = os.getpid(), platform.process_identity(os.getpid())
    yield state


def test_the_local_back_end_judges_its_agent_by_pid_and_creation_time(local_state: RunState) -> None:
    backend = LocalBackend()
    local_state.agent_pid, local_state.agent_create_time = os.getpid(), platform.process_identity(os.getpid())
    assert backend.agent_alive(local_state, None)
    local_state.agent_create_time = (local_state.agent_create_time or 0) - 100  # a reused pid
    assert not backend.agent_alive(local_state, None)
    assert backend.agent_alive(local_state, FakeAgent(pid=1)), "an agent we hold that runs"
    assert not backend.agent_alive(None, FakeAgent(pid=1, exit_code=0))
    assert not backend.revivable


def test_the_local_back_end_names_the_trainer_and_its_tree_as_ours(local_state: RunState) -> None:
    pids = LocalBackend().local_pids(local_state)
    assert pids[0] == os.getpid()
    assert len(pids) == len(set(pids))
    assert LocalBackend().local_pids(RunState(run_id="r", job_id="j")) == []


def test_the_local_back_end_asks_its_agent_to_stop_through_stop_json(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    LocalBackend().request_stop(run, kill=True, grace_seconds=3.0, by="a test")
    request = run.read_stop_request()
    assert request is not None and (request["kill"], request["graceSeconds"]) == (True, 3.0)
