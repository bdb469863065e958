"""Issue 39 item 3: a run folder renamed or replaced while its run lives.

``mv .aide/training/runs/<id> <id>.bak`` (or a file, or another folder, put in
its place): on main the agent followed the folder to its new name, where no
server lists it; ``arena/stop`` answered idle, every start was 1003 and the
trainer lived on. The agent now stops its trainer cooperatively and says so
(its log and stderr, in the folder where it now is), and the workspace is free
again: a start is accepted. A moved workspace is still followed (its tests:
tests/reliability/test_nothing_outlives_its_supervisor.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from pygls.exceptions import JsonRpcException

from arena_ls import platform
from arena_ls.agent.folderwatch import follows_the_workspace
from arena_ls.errors import ALREADY_RUNNING
from tests.helpers.lsp import (
    ArenaClient,
    job,
    make_workspace,
    poll_until,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)


def _gone(pid: int, created: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() != created or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _replace(folder: Path, how: str) -> Path:
    moved = folder.with_name(folder.name + ".bak")
    folder.rename(moved)
    if how == "a-file":
        folder.write_text("not a run folder")
    elif how == "a-folder":
        folder.mkdir()
    return moved


def _kill_agent_and_trainer(trainer: psutil.Process) -> None:
    """The agent first (else it relaunches the trainer), then the trainer."""
    agent = trainer.parent()
    for process in (agent, trainer):
        if process is not None:
            with contextlib.suppress(psutil.Error):
                process.kill()


async def _started(client: ArenaClient, job_id: str, found: dict[str, Any]) -> bool:
    try:
        found.update(await client.call("arena/start", {"id": job_id}))
    except JsonRpcException as error:
        assert error.code == ALREADY_RUNNING[0], error
        return False
    return True


@pytest.mark.parametrize("how", ["renamed", "a-file", "a-folder"])
async def test_a_run_whose_folder_is_renamed_or_replaced_is_stopped_and_frees_the_workspace(
    tmp_path: Path, how: str
) -> None:
    jobs = [
        job("t", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", kind="train"),
        job("next", "--steps", "3"),
    ]
    root = make_workspace(tmp_path / "ws", jobs)
    client = await start_server(root)
    trainer: psutil.Process | None = None
    try:
        info = await client.call("arena/start", {"id": "t"})
        run = await wait_status(client, info["runId"], "running")
        trainer = psutil.Process(run["pid"])
        created = trainer.create_time()
        moved = _replace(run_dir(root, info["runId"]), how)
        await wait_for(lambda: _gone(trainer.pid, created), what="the trainer stopped")
        state = moved / "state.json"
        await wait_for(
            lambda: json.loads(state.read_text()).get("status") == "stopped", what="its final state"
        )
        log = (moved / "output.log").read_bytes()
        assert b"the run folder was renamed or replaced" in log, log[-2000:]
        found: dict[str, Any] = {}
        await poll_until(lambda: _started(client, "next", found), "a start accepted")
        final = await wait_status(client, found["runId"], "succeeded", "crashed", "failed", "stopped")
        assert final["status"] == "succeeded", final
    finally:
        status = await client.call("arena/status", {})
        if status["active"] is not None:
            await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)
        if trainer is not None and not _gone(trainer.pid, created):
            _kill_agent_and_trainer(trainer)  # on main: a run nobody lists, whose trainer lives on


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the held folder's place: /proc (Linux)")
def test_a_folder_made_where_the_held_one_was_is_not_taken_for_it(tmp_path: Path) -> None:
    held = tmp_path / ".aide" / "training" / "runs" / "r1"
    held.mkdir(parents=True)
    handle = platform.open_folder(held)
    try:
        moved = _replace(held, "a-folder")
        assert platform.folder_now(handle, held) == moved
        assert not follows_the_workspace(held, moved)
        workspace_moved = tmp_path.with_name(tmp_path.name + "-moved") / ".aide" / "training" / "runs" / "r1"
        assert follows_the_workspace(held, workspace_moved)
    finally:
        os.close(handle)
