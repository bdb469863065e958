"""``arena/statusChanged`` on every status change, even one that no reading of ``state.json`` caught.

The server polls the run's state. A stop that completes between two polls
reads as ``running`` then ``stopped``; the contract still owes the client
its ``stopping``. Here the run's state is written by the test (its agent is
the test process itself, alive), so the skipped status is a fact, not a race.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from arena_ls import platform
from arena_ls.lifecycle.rundir import RunSpec, StateFolder
from arena_ls.lifecycle.runlock import RunLock
from arena_ls.lifecycle.states import RunStatus
from tests.helpers.fake_backend import write_state
from tests.helpers.lsp import job, make_workspace, start_server, stop_server, wait_for


async def test_a_stop_no_poll_saw_is_still_announced_as_stopping(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    folder = StateFolder(root / ".aide" / "training")

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="quick", job_name="Quick", kind="task", argv=["x"], cwd=".")

    run = RunLock(folder).claim("quick", build)
    me, created = os.getpid(), platform.process_identity(os.getpid())
    write_state(run, status=RunStatus.RUNNING, pid=me, pid_create_time=created, agent_pid=me,
                agent_create_time=created, started_at=time.time())  # fmt: skip
    client = await start_server(root)
    try:
        await client.call("arena/status", {})
        await wait_for(lambda: client.status_of(run.run_id), what="the adopted run announced")
        write_state(run, status=RunStatus.STOPPED, stopped_by="file", exit_code=0, ended_at=time.time())
        await wait_for(lambda: "stopped" in client.status_of(run.run_id), what="stopped announced")
        statuses = client.status_of(run.run_id)
        assert statuses[-2:] == ["stopping", "stopped"], statuses
        stopping = [s for s in client.statuses if s["runId"] == run.run_id and s["status"] == "stopping"][-1]
        assert (stopping["endedAt"], stopping["exitCode"], stopping["stoppedBy"]) == (None, None, None)
        stopped = client.statuses[-1]
        assert (stopped["status"], stopped["stoppedBy"], stopped["exitCode"]) == ("stopped", "file", 0)
    finally:
        await stop_server(client)
