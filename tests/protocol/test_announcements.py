"""``arena/statusChanged`` from the server's two announcers, ``run_changed`` and ``insights_changed``:
both fill in the statuses a run passed through since the last announcement, in order."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.lifecycle import follower_told
from arena_ls.lifecycle.runview import RunView
from arena_ls.protocol.app import create_server
from arena_ls.protocol.server import ArenaServer
from arena_ls.run.rundir import RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.helpers.fake_backend import write_state
from tests.helpers.lsp import job, make_workspace


@pytest.fixture
async def announcing(tmp_path: Path) -> Any:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    server = create_server()
    server.root = root
    sent: list[dict[str, Any]] = []
    server.send_notification = lambda method, payload: sent.append(payload)  # type: ignore[method-assign]
    server.window_show_message = lambda params: None  # type: ignore[method-assign]
    # No client here: what the progress bar and the lenses make of a change is not this test's.
    server.run_progress.update = lambda view: None  # type: ignore[method-assign]
    server.active_changed = lambda: None  # type: ignore[method-assign]
    yield server, root, sent
    if server.arena is not None:
        await server.arena.close()


def a_run(root: Path, status: RunStatus, **fields: Any) -> RunView:
    folder = StateFolder(root / ".aide" / "training")

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="quick", job_name="Quick", kind="task", argv=["x"], cwd=".")

    run = RunLock(folder).claim("quick", build)
    me, created = os.getpid(), platform.process_identity(os.getpid())
    write_state(run, status=status, pid=me, pid_create_time=created, agent_pid=me,
                agent_create_time=created, started_at=time.time(), **fields)  # fmt: skip
    view = RunView(run, run.read_spec())
    view.refresh_state()
    return view


async def test_an_insight_announcement_first_fills_in_the_statuses_no_reading_caught(
    announcing: Any,
) -> None:
    server, root, sent = announcing
    view = a_run(root, RunStatus.RUNNING)
    server.run_changed(view)
    write_state(view.run_dir, status=RunStatus.STOPPED, stopped_by="file", exit_code=0, ended_at=time.time())
    view.refresh_state()
    server.insights_changed(view, [])
    assert [payload["status"] for payload in sent] == ["running", "stopping", "stopped"]
    server.insights_changed(view, [])
    assert [payload["status"] for payload in sent][3:] == ["stopped"], "nothing filled in twice"


async def test_a_battery_stop_no_reading_caught_is_announced_stopping_then_restarting(
    announcing: Any,
) -> None:
    """The run stopped for the battery and waits for power: ``running`` was read, then
    ``restarting`` with ``stoppedBy``; its ``stopping`` (milliseconds long) was never read. A loaded
    machine's server missed it (1 of 11 rounds with two CPU hogs); the client must see it."""
    server, root, sent = announcing
    view = a_run(root, RunStatus.RUNNING)
    server.run_changed(view)
    write_state(view.run_dir, status=RunStatus.RESTARTING, stopped_by="battery")
    view.refresh_state()
    server.run_changed(view)
    assert [payload["status"] for payload in sent] == ["running", "stopping", "restarting"]
    server.run_changed(view)  # read again (its waitingFor changed, say): nothing invented
    assert [payload["status"] for payload in sent][3:] == ["restarting"]


async def test_a_crash_relaunch_goes_to_restarting_directly(announcing: Any) -> None:
    server, root, sent = announcing
    view = a_run(root, RunStatus.RUNNING)
    server.run_changed(view)
    write_state(view.run_dir, status=RunStatus.RESTARTING, restarts=1)
    view.refresh_state()
    server.run_changed(view)
    assert [payload["status"] for payload in sent] == ["running", "restarting"]


async def test_the_announced_statuses_of_runs_no_longer_followed_are_forgotten(
    announcing: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server: ArenaServer = announcing[0]
    root: Path = announcing[1]
    monkeypatch.setattr(follower_told, "ANNOUNCED_KEPT", 2)
    view = a_run(root, RunStatus.RUNNING)
    server.ws.supervisor.views[view.run_id] = view
    told = server.ws.supervisor.follower.told
    for gone in ("old-1", "old-2"):
        told.remember(gone, (RunStatus.SUCCEEDED, 0))
    server.run_changed(view)
    assert set(told.told) == {view.run_id}, "bounded, the followed run kept"
