"""``arena/statusChanged`` on every status change, even one that no reading of ``state.json`` caught.

The server polls the run's state. A stop that completes between two polls
reads as ``running`` then ``stopped``; the contract still owes the client
its ``stopping``. A relaunch that completes between two polls reads as
``running`` then ``running`` with ``restarts`` one higher; the client is
still owed its ``restarting`` and ``running``. In the first two tests the
run's state is written by the test (its agent is the test process itself,
alive), so the skipped status is a fact, not a race; in the last one a real
agent relaunches a real trainer while the server is stopped.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from arena_ls import platform
from arena_ls.run.rundir import Failure, RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.helpers.fake_backend import write_state
from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    job,
    make_workspace,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

FINAL_ONLY = ("endedAt", "exitCode", "signal", "stoppedBy", "failure")
"""The fields only an ended run has: null in a status the server filled in."""


def adopted_run(root: Path) -> RunDir:
    """A run of ``quick`` whose agent and trainer are this test process, recorded ``running``."""
    folder = StateFolder(root / ".aide" / "training")

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="quick", job_name="Quick", kind="task", argv=["x"], cwd=".")

    run = RunLock(folder).claim("quick", build)
    me, created = os.getpid(), platform.process_identity(os.getpid())
    write_state(run, status=RunStatus.RUNNING, pid=me, pid_create_time=created, agent_pid=me,
                agent_create_time=created, started_at=time.time())  # fmt: skip
    return run


def announced(client: ArenaClient, run_id: str) -> list[dict[str, Any]]:
    return [s for s in client.statuses if s["runId"] == run_id]


async def test_a_stop_no_poll_saw_is_still_announced_as_stopping(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    run = adopted_run(root)
    client = await start_server(root)
    try:
        await client.call("arena/status", {})
        await wait_for(lambda: client.status_of(run.run_id), what="the adopted run announced")
        ended = {"stopped_by": "kill", "exit_code": -9, "signal": "SIGKILL", "ended_at": time.time(),
                 "failure": Failure("killed", "stopped with SIGKILL after the grace window")}  # fmt: skip
        write_state(run, status=RunStatus.STOPPED, **ended)
        await wait_for(lambda: "stopped" in client.status_of(run.run_id), what="stopped announced")
        statuses = client.status_of(run.run_id)
        assert statuses[-2:] == ["stopping", "stopped"], statuses
        stopping = [s for s in announced(client, run.run_id) if s["status"] == "stopping"][-1]
        assert {field: stopping[field] for field in FINAL_ONLY} == dict.fromkeys(FINAL_ONLY), stopping
        stopped = client.statuses[-1]
        assert (stopped["status"], stopped["stoppedBy"], stopped["exitCode"]) == ("stopped", "kill", -9)
        assert all(stopped[field] is not None for field in FINAL_ONLY), stopped  # the nulls above are made
    finally:
        await stop_server(client)


async def test_a_relaunch_no_poll_saw_is_still_announced_as_restarting(tmp_path: Path) -> None:
    """``running``, then ``running`` with ``restarts`` 1: the client hears restarting, then running."""
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    run = adopted_run(root)
    client = await start_server(root)
    try:
        await client.call("arena/status", {})
        await wait_for(lambda: client.status_of(run.run_id), what="the adopted run announced")
        assert {s["restarts"] for s in announced(client, run.run_id)} == {0}
        write_state(run, restarts=1, started_at=time.time())  # relaunched (the same pid: this process)
        await wait_for(
            lambda: [
                s for s in announced(client, run.run_id) if s["restarts"] == 1 and s["status"] == "running"
            ],
            what="the relaunched run announced",
        )
        seen = [(s["status"], s["restarts"]) for s in announced(client, run.run_id)]
        first_relaunched = next(i for i, (_, restarts) in enumerate(seen) if restarts == 1)
        assert seen[first_relaunched - 1 : first_relaunched + 2] == [
            ("running", 0),
            ("restarting", 1),
            ("running", 1),
        ], seen
        restarting = next(s for s in announced(client, run.run_id) if s["status"] == "restarting")
        assert {field: restarting[field] for field in FINAL_ONLY} == dict.fromkeys(FINAL_ONLY), restarting
    finally:
        await stop_server(client)


def recorded(root: Path, run_id: str) -> dict[str, Any]:
    try:
        state: dict[str, Any] = json.loads((run_dir(root, run_id) / "state.json").read_text())
    except (OSError, ValueError):  # between the agent's writes
        return {}
    return state


async def test_a_real_relaunch_the_server_slept_through_is_announced_in_order(tmp_path: Path) -> None:
    """A real agent relaunches a real trainer while the server is stopped (SIGSTOP), so no reading
    of the server's can catch the ``restarting``: the client still hears restarting, then running."""
    spec = job("once", "--steps", "100000", "--interval", "0.02", "--crash-on-file", "crash-now",
               kind="train", restart={"maxRestarts": 2, "backoffSeconds": 0})  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    server = client.server_process.pid
    try:
        info = await client.call("arena/start", {"id": "once"})
        run_id = info["runId"]
        await wait_for(lambda: "running" in client.status_of(run_id), what="running announced")
        os.kill(server, signal.SIGSTOP)
        try:
            (root / "crash-now").touch()
            await wait_for(
                lambda: (
                    (state := recorded(root, run_id)).get("restarts") == 1 and state["status"] == "running"
                ),
                what="the relaunched trainer recorded running",
            )
        finally:
            os.kill(server, signal.SIGCONT)
        await wait_for(
            lambda: [s for s in announced(client, run_id) if (s["status"], s["restarts"]) == ("running", 1)],
            what="the relaunched run announced",
        )
        seen = [(s["status"], s["restarts"]) for s in announced(client, run_id)]
        first_relaunched = next(i for i, (_, restarts) in enumerate(seen) if restarts == 1)
        assert seen[first_relaunched - 1 : first_relaunched + 2] == [
            ("running", 0),
            ("restarting", 1),
            ("running", 1),
        ], seen
        await client.call("arena/stop", {"confirm": True})
        final = await wait_status(client, run_id, "stopped", "crashed", "lost", "succeeded")
        assert (final["status"], final["restarts"]) == ("stopped", 1), final
        lines = [line["text"] for line in await all_logs(client, run_id)]
        assert sum(text.startswith("argv: ") for text in lines) == 2, "exactly one relaunch"
    finally:
        await stop_server(client)
