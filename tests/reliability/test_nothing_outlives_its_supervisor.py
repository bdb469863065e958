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
import pytest

from arena_ls.run.rundir import CheckpointRecord, RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from tests.helpers.lsp import (
    ArenaClient,
    job,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)
from tests.helpers.waiting import wait_until

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


async def _until_stepping(client: ArenaClient, run_id: str) -> None:
    """Wait until the run is ``running`` and its trainer has reported a step: the moves below come
    after that. A move before the trainer's interpreter opened its script fails the attempt
    (Python made the script's path absolute at its start), and one before the exec is refused
    by the exec check ("gone since the gates passed; nothing was started",
    ``test_exec_check_units``): the run ends ``crashed``, never reaching the stop tested."""
    await wait_status(client, run_id, "running")

    async def stepping() -> bool:
        runs = (await client.call("arena/status", {}))["runs"]
        return any(r["runId"] == run_id and (r["step"] or 0) >= 1 for r in runs)

    await poll_until(stepping, "the trainer's first step")


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
    await _until_stepping(client, run["runId"])
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


def _agent_run(workspace: Path, script: str = "stop_only_trainer.py") -> RunDir:
    """A run of the stop-only trainer, created as a server creates one (no server here)."""
    folder = StateFolder(workspace / ".aide" / "training")
    folder.ensure()

    def build(run_id: str) -> RunSpec:
        argv = [sys.executable, script, "--ckpt-every", "1000"]
        return RunSpec(
            run_id=run_id, job_id="lm", job_name="lm", kind="train", argv=argv, cwd=str(workspace),
            resume_args=["--resume", "--start-step", "{step}"], grace_seconds=60.0,
        )  # fmt: skip

    return RunDir(RunLock(folder).claim("lm", build).path)


def _until_20_steps(run_dir: RunDir) -> dict[str, Any]:
    """The run's state once it is ``running`` at ``run_dir`` and its trainer is past step 20."""
    state: dict[str, Any] = {}

    def running() -> bool:
        with contextlib.suppress(OSError, ValueError):
            state.update(json.loads(run_dir.state_path.read_text()))
        return state.get("status") == "running" and (state.get("step") or 0) >= 20

    wait_until(running, f"the trainer to run 20 steps in {run_dir.path}")
    return state


def test_an_agent_whose_run_folder_is_deleted_stops_its_trainer_cooperatively(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    shutil.copy(TRAINERS / "stop_only_trainer.py", workspace)
    run_dir = _agent_run(workspace)
    agent = subprocess.Popen(
        [sys.executable, "-m", "arena_ls.agent.local.agent", str(run_dir.path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        state = _until_20_steps(run_dir)
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
    stop signal, and the trainer stops cooperatively (it saves), not by the kill. The agent may
    have loaded after the move (it then never stood at the old path): its log says so either
    way, and it still knows the path the trainer was told."""
    spec = job("long", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    run = await client.call("arena/start", {"id": "long"})
    await _until_stepping(client, run["runId"])
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
        assert not root.exists(), "the agent's records went to the new place only (a checkpoint every 0.25 s)"
    finally:
        await _cleanup(client)


def test_a_job_record_is_never_written_where_the_workspace_was(tmp_path: Path) -> None:
    """An agent that records a checkpoint in the second before its folder watch sees the move
    gets an error (its writer retries, at the new place by then), not the old path rebuilt."""
    workspace = tmp_path / "ws"
    folder = StateFolder(workspace / ".aide" / "training")
    folder.ensure()
    workspace.rename(tmp_path / "moved")
    checkpoint = CheckpointRecord(step=40, path="ckpt-40.pt", at=1.0)
    with pytest.raises(FileNotFoundError):
        folder.record_job_checkpoint("lm", checkpoint)
    with pytest.raises(FileNotFoundError):
        folder.begin_job_anew("lm", "lm-1")
    assert not workspace.exists()
    StateFolder(tmp_path / "moved" / ".aide" / "training").record_job_checkpoint("lm", checkpoint)


# ``launch`` as a server starts it, with the workspace moved right after the trainer started:
# the agent loads (and reads its spec) at the new path, its trainer was told the old stop file.
MOVING_LAUNCH = """
import os, sys
from arena_ls.agent import launch
started = launch.launch_from_spec
def start_then_move(run_dir):
    early = started(run_dir)
    os.rename(sys.argv[2], sys.argv[3])
    return early
launch.launch_from_spec = start_then_move
sys.exit(launch.main([sys.argv[1]]))
"""


def test_a_workspace_moved_while_the_agent_loads_still_stops_its_trainer_cooperatively(
    tmp_path: Path,
) -> None:
    """The agent never worked from the old path, yet the trainer polls the old stop file: the
    agent knows what the trainer was told, says it followed the move, and sends the signal too."""
    workspace, moved = tmp_path / "ws", tmp_path / "moved"
    workspace.mkdir()
    script = tmp_path / "trainers" / "stop_only_trainer.py"  # outside the workspace: the move
    script.parent.mkdir()  # cannot race the interpreter opening its script
    shutil.copy(TRAINERS / "stop_only_trainer.py", script)
    run_dir = _agent_run(workspace, str(script))
    agent = subprocess.Popen(
        [sys.executable, "-c", MOVING_LAUNCH, str(run_dir.path), str(workspace), str(moved)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    new_place = RunDir(moved / ".aide" / "training" / "runs" / run_dir.path.name)
    try:
        _until_20_steps(new_place)
        new_place.request_stop(kill=False, grace_seconds=60.0, by="a server at the new path")
        _, stderr = agent.communicate(timeout=120)
        assert agent.returncode == 0, stderr[-3000:]
        final = json.loads(new_place.state_path.read_text())
        assert (final["status"], final["stoppedBy"], final["exitCode"]) == ("stopped", "signal", 0)
        saved = json.loads((moved / "checkpoints" / "ckpt.json").read_text())
        assert saved["step"] >= 20, "the trainer saved on its cooperative stop"
        log = (new_place.path / "output.log").read_bytes()
        assert b"while the agent loaded: following it there" in log
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
