"""Issue 23: nothing the supervisor started outlives it, and a moved workspace stays stoppable.

Real servers, agents, trainers and grandchildren; real signals, renames and deletions.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from arena_ls.lifecycle.rundir import RunDir, RunSpec, StateFolder
from arena_ls.lifecycle.runlock import RunLock
from tests.helpers.lsp import (
    ArenaClient,
    job,
    make_workspace,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

TRAINERS = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
# A server that adopts the orphans of its descendants and never reaps them: a trainer whose
# agent died stays an unreaped zombie, as it does under an init that reaps late (or never).
HOLDING_SERVER = [
    sys.executable,
    "-c",
    "import ctypes, os, sys; ctypes.CDLL(None).prctl(36, 1, 0, 0, 0); "
    "os.execv(sys.executable, [sys.executable, '-m', 'arena_ls'])",
]


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _cleanup(client: ArenaClient) -> None:
    with contextlib.suppress(Exception):
        await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


async def test_an_agent_killed_under_a_watching_server_leaves_no_grandchild_even_of_a_zombie_trainer(
    tmp_path: Path,
) -> None:
    spec = job("tree", "--steps", "100000", "--interval", "0.05", "--grandchildren", "2", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root, command=HOLDING_SERVER)
    try:
        run = await client.call("arena/start", {"id": "tree"})
        trainer = psutil.Process(run["pid"])
        await wait_for(lambda: len(trainer.children(recursive=True)) >= 4, what="4 descendants")
        descendants = [child.pid for child in trainer.children(recursive=True)]
        os.kill(run["agentPid"], signal.SIGKILL)
        lost = await wait_status(client, run["runId"], "lost")
        await wait_for(lambda: not alive(run["pid"]), what="the trainer to die with its agent")
        survivors = [pid for pid in descendants if alive(pid)]
        assert survivors == [], f"alive after the verdict: {survivors} ({lost['failure']})"
    finally:
        await _cleanup(client)


async def test_a_run_of_a_moved_workspace_is_stopped_from_a_server_at_the_new_path(tmp_path: Path) -> None:
    spec = job("long", "--steps", "100000", "--interval", "0.05", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    run = await client.call("arena/start", {"id": "long"})
    await stop_server(client)  # the run goes on without a server
    moved = tmp_path / "moved"
    os.rename(root, moved)
    client = await start_server(moved)
    try:
        listed = await wait_status(client, run["runId"], "running")
        assert listed["pid"] == run["pid"]
        stopped = await client.call("arena/stop", {"kill": True, "confirm": True})
        assert (stopped["status"], stopped["stoppedBy"]) == ("stopped", "kill")
        await wait_for(lambda: not alive(run["pid"]) and not alive(run["agentPid"]), what="both gone")
        state = json.loads((moved / ".aide/training/runs" / run["runId"] / "state.json").read_text())
        assert state["status"] == "stopped", "the agent recorded the end at the new path"
    finally:
        await _cleanup(client)


def _agent_run(workspace: Path) -> RunDir:
    """A run of the stop-only trainer, created as a server creates one (no server here)."""
    folder = StateFolder(workspace / ".aide" / "training")
    folder.ensure()

    def build(run_id: str) -> RunSpec:
        argv = [sys.executable, "stop_only_trainer.py", "--ckpt-every", "1000"]
        return RunSpec(
            run_id=run_id, job_id="lm", job_name="lm", kind="train", argv=argv, cwd=str(workspace),
            resume_args=["--resume", "--start-step", "{step}"], grace_seconds=60.0,
        )  # fmt: skip

    return RunDir(RunLock(folder).claim("lm", build).path)


def test_an_agent_whose_run_folder_is_deleted_stops_its_trainer_cooperatively(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    shutil.copy(TRAINERS / "stop_only_trainer.py", workspace)
    run_dir = _agent_run(workspace)
    agent = subprocess.Popen(
        [sys.executable, "-m", "arena_ls.lifecycle.agent", str(run_dir.path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        state: dict[str, Any] = {}

        def running() -> bool:
            with contextlib.suppress(OSError, ValueError):
                state.update(json.loads(run_dir.state_path.read_text()))
            return state.get("status") == "running" and (state.get("step") or 0) >= 20

        from tests.helpers.waiting import wait_until

        wait_until(running, "the trainer to run 20 steps")
        shutil.rmtree(run_dir.path)
        _, stderr = agent.communicate(timeout=120)
        assert agent.returncode == 0, stderr[-3000:]
        assert f"the run folder {run_dir.path} is gone" in stderr
        assert "stopping its trainer" in stderr and "cooperatively" in stderr
        saved = json.loads((workspace / "checkpoints" / "ckpt.json").read_text())
        assert saved["step"] >= 20, "the trainer saved on its cooperative stop"
        assert not alive(state["pid"])
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()


async def test_a_cooperative_stop_of_a_moved_workspace_reaches_a_trainer_polling_the_old_stop_file(
    tmp_path: Path,
) -> None:
    """The trainer was told the stop file's old path: after the move the agent also sends the
    stop signal, and the trainer stops cooperatively (it saves), not by the kill."""
    spec = job("long", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    run = await client.call("arena/start", {"id": "long"})
    await stop_server(client)
    moved = tmp_path / "moved"
    os.rename(root, moved)
    client = await start_server(moved)
    try:
        await wait_status(client, run["runId"], "running")
        log = moved / ".aide/training/runs" / run["runId"] / "output.log"
        await wait_for(lambda: b"the run folder moved to" in log.read_bytes(), what="the agent to follow")
        stopped = await client.call("arena/stop", {"confirm": True, "graceSeconds": 60})
        assert (stopped["status"], stopped["stoppedBy"], stopped["exitCode"]) == ("stopped", "signal", 0)
        assert stopped["lost"] == {"steps": 0, "seconds": 0.0}, "the trainer saved on its stop"
    finally:
        await _cleanup(client)
