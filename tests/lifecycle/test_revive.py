"""Reviving a run that outlives its agent, and the runs that must not hold the workspace.

The supervisor is driven through a fake back end (or the real Ray back end
with its process start faked as Windows does it), with no cluster: one new
agent per dead one, never a second; a new agent that ends before it
recorded itself makes the run ``lost``; a damaged cluster run never holds
the lock; a spare agent never waits beside another server's run; a stop
answers within its bound. The damaged run is also shown to a real server.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.cluster import backend as ray_backend
from arena_ls.cluster.backend import RayBackend
from arena_ls.errors import LAUNCH_FAILED, ArenaError
from arena_ls.lifecycle import stopper as stopper_module
from arena_ls.lifecycle.backends.base import Backends, RunBackend
from arena_ls.lifecycle.backends.local import LocalBackend
from arena_ls.lifecycle.runview import AGENT_START_GRACE
from arena_ls.lifecycle.starter import StartRequest
from arena_ls.lifecycle.stopper import StopRequest
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.run.rundir import ClusterRecord, ClusterSpec, RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from arena_ls.settings import Settings
from tests.helpers.fake_backend import FakeAgent, FakeBackend, Recorder, write_state
from tests.helpers.lsp import job, make_workspace, start_server, stop_server, wait_status

WAIT = 20.0
"""Every wait in this file ends at the event; this only bounds a broken one."""
DEAD = (2**22 + 17, 1.0)
"""A pid and creation time that name no living process."""
SID = "arena-quick-1"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", [job("quick", "--steps", "3"), job("other", "--steps", "2")])


def supervisor_with(root: Path, *backends: RunBackend) -> Supervisor:
    default, *others = backends
    return Supervisor(root, lambda: Settings(), Recorder(), backends=Backends(default, *others))


def cluster_run(root: Path, backend: str, status: RunStatus = RunStatus.RUNNING, **fields: Any) -> RunDir:
    """A cluster run left by an earlier server whose agent is gone: spec, lock, recorded submission."""
    folder = StateFolder(root / ".aide" / "training")

    def build(run_id: str) -> RunSpec:
        cluster = ClusterSpec(name="lab", kind="ray", address="http://127.0.0.1:9")
        return RunSpec(
            run_id=run_id, job_id="quick", job_name="Quick", kind="task", argv=["x"], cwd=str(root),
            backend=backend, cluster=cluster, stop_method="signal",
        )  # fmt: skip

    run = RunLock(folder).claim("quick", build)
    record = ClusterRecord(
        name="lab", kind="ray", address="http://127.0.0.1:9", submission_id=SID, accepted=SID
    )
    fields.setdefault("agent_pid", DEAD[0])
    fields.setdefault("agent_create_time", DEAD[1])
    write_state(run, status=status, cluster=record, **fields)
    return run


def claims(run: RunDir) -> list[Path]:
    return sorted(run.path.glob(".revive-*.claim"))


def holder(root: Path) -> str | None:
    return RunLock(StateFolder(root / ".aide" / "training")).holder()


# -- 4. Windows: the revived agent's handle is the detach intermediate ---------------------------------


def test_an_intermediate_that_exits_at_once_is_not_a_dead_agent(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Windows ``spawn_detached`` returns the intermediate, which exits 0 once the agent runs:
    that is no reason to revive the run a second time."""
    spawned: list[list[str]] = []

    def windows_spawn(argv: Any, *, cwd: Path, log_file: Path) -> FakeAgent:
        spawned.append(list(argv))
        return FakeAgent(pid=6_000_000 + len(spawned), exit_code=0)  # the intermediate, done

    monkeypatch.setattr(ray_backend.platform, "spawn_detached", windows_spawn)
    run = cluster_run(workspace, "ray")
    supervisor = supervisor_with(workspace, LocalBackend(), RayBackend())
    supervisor.scan()
    assert len(spawned) == 1 and spawned[0][-1] == "--adopt"
    view = supervisor.views[run.run_id]
    for _ in range(3):  # the agent's rounds: the intermediate is reaped, liveness judged again
        view.reap_agent()
        view.check_lost(supervisor.folder)
    assert len(spawned) == 1, "one new agent per dead one"
    assert view.status is RunStatus.RUNNING and holder(workspace) == run.run_id


# -- 5. a new agent that ends before it recorded itself ---------------------------------------------


def test_a_revived_agent_that_fails_before_recording_itself_makes_the_run_lost(workspace: Path) -> None:
    run = cluster_run(workspace, "fake")
    backend = FakeBackend(can_revive=True, alive=False)
    supervisor = supervisor_with(workspace, LocalBackend(), backend)
    supervisor.scan()
    view = supervisor.views[run.run_id]
    assert backend.revived == [run.run_id]
    assert isinstance(view.agent, FakeAgent)
    view.agent.exit_code = 99  # the fake back end's failed start
    view.reap_agent()
    assert view.check_lost(supervisor.folder) is True
    assert backend.revived == [run.run_id], "never revived every second"
    state = run.read_state()
    assert state.status is RunStatus.LOST
    assert state.failure is not None and "before it recorded itself" in state.failure.evidence
    assert backend.ended == [run.run_id], "what runs of it is ended (a cluster job: asked to stop)"
    assert holder(workspace) is None


def test_a_revival_whose_server_went_away_unrecorded_makes_the_run_lost(workspace: Path) -> None:
    run = cluster_run(workspace, "fake")
    first = FakeBackend(can_revive=True, alive=False)
    supervisor_with(workspace, LocalBackend(), first).scan()  # revives it, then goes away
    assert first.revived == [run.run_id]
    (claim,) = claims(run)
    second = FakeBackend(can_revive=True, alive=False)
    later = supervisor_with(workspace, LocalBackend(), second)
    later.scan()
    assert second.revived == [] and later.views[run.run_id].status is RunStatus.RUNNING, "it may be starting"
    old = claim.stat().st_mtime - AGENT_START_GRACE - 1
    os.utime(claim, (old, old))  # the new agent never recorded itself within the grace
    assert later.views[run.run_id].check_lost(later.folder) is True
    assert run.read_state().status is RunStatus.LOST
    assert second.revived == [] and second.ended == [run.run_id]
    assert holder(workspace) is None


def test_a_new_agent_on_a_reused_pid_is_revived_in_its_turn(workspace: Path) -> None:
    """The claim names the dead agent by pid and creation time: a later agent that got the
    same pid (and recorded itself) is another agent, revived in its turn when it dies."""
    run = cluster_run(workspace, "fake")
    first = FakeBackend(can_revive=True, alive=False)
    supervisor_with(workspace, LocalBackend(), first).scan()  # revives it, then goes away
    assert first.revived == [run.run_id]
    write_state(run, agent_pid=DEAD[0], agent_create_time=DEAD[1] + 1)  # recorded itself; died since
    second = FakeBackend(can_revive=True, alive=False)
    supervisor_with(workspace, LocalBackend(), second).scan()
    assert second.revived == [run.run_id]
    assert run.read_state().status is RunStatus.RUNNING


# -- 6. a damaged cluster run never holds the workspace ----------------------------------------------


async def test_a_damaged_cluster_run_whose_agent_is_gone_lets_other_runs_start(workspace: Path) -> None:
    run = cluster_run(workspace, "ray")
    (run.path / "output.idx").write_bytes(os.urandom(33 * 7))
    client = await start_server(workspace)
    try:
        info = await client.call("arena/start", {"id": "other"})
        assert info["status"] in ("running", "succeeded"), info
        await wait_status(client, info["runId"], "succeeded")
        status = await client.call("arena/status", {})
        victim = next(r for r in status["runs"] if r["runId"] == run.run_id)
        assert victim["status"] == "lost" and victim["failure"]["kind"] == "damaged"
        assert run.read_state().status is RunStatus.RUNNING, "its files stay as found"
    finally:
        await stop_server(client)


# -- 8. the spare agent and another server's run ------------------------------------------------------


def test_the_spare_is_let_go_when_another_server_starts_a_run(workspace: Path) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, backend)
    assert supervisor.poll_once() is False
    assert backend.prepared == [supervisor.root] and backend.released == 0
    me = os.getpid()  # the other server's run: its agent lives (it is this test's process)
    cluster_run(workspace, "fake", agent_pid=me, agent_create_time=platform.process_identity(me))
    supervisor.scan()
    assert supervisor.poll_once() is True
    assert backend.released == 1, "no spare waits beside a running trainer"
    assert supervisor.poll_once() is True
    assert backend.released == 1, "let go once"


# -- 1. a stop's answer is bounded --------------------------------------------------------------------


async def test_a_stop_whose_run_never_ends_answers_the_run_as_it_stands(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stopper_module, "STOP_ANSWER_MARGIN", 0.0)
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, backend)
    try:
        starting = asyncio.create_task(supervisor.start(StartRequest(id="quick")))
        await asyncio.wait_for(backend.start_seen.wait(), WAIT)
        write_state(backend.started[0], status=RunStatus.RUNNING, pid=12345)
        await asyncio.wait_for(starting, WAIT)
        view = await asyncio.wait_for(supervisor.stop(StopRequest(id="quick", grace_seconds=0.0)), WAIT)
        assert view is not None and view.status is RunStatus.RUNNING, "answered, not waited on forever"
        assert backend.stops and backend.stops[0]["grace"] == 0.0
    finally:
        await supervisor.close()


# -- 3. a start whose agent died: what it may have started is ended ---------------------------------


async def test_a_failed_start_ends_what_its_agent_may_have_started(workspace: Path) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, backend)
    try:
        starting = asyncio.create_task(supervisor.start(StartRequest(id="quick")))
        await asyncio.wait_for(backend.start_seen.wait(), WAIT)
        backend.agents[0].exit_code = 99  # died before it recorded a trainer (a submission, say)
        with pytest.raises(ArenaError) as refused:
            await asyncio.wait_for(starting, WAIT)
        assert (refused.value.code, refused.value.reason) == LAUNCH_FAILED
        run_id = backend.started[0].run_id
        assert backend.ended == [run_id]
        assert "the fake trainer was ended" in str(refused.value.data["evidence"])
    finally:
        await supervisor.close()
