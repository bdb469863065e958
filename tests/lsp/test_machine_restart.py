"""A restart of the machine under a run (contract 8.3), through real servers, agents and trainers.

The restart is stood in for the way the issue asks: the run's agent and trainer are killed
together (``kill -9`` both) while no server runs, and the fake machine of
``tests/helpers/fake_hardware.py`` reports a later boot (another boot id, a later boot time).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from arena_ls.run.state_folder import StateFolder
from tests.client.support import run_arena, status_json
from tests.helpers.fake_hardware import write_fake_hardware
from tests.helpers.lsp import (
    ArenaClient,
    job,
    make_workspace,
    poll_until,
    stop_server,
    wait_for,
    wait_status,
)
from tests.helpers.waiting import wait_until
from tests.lsp.test_health_and_preflight import fake_client

pytestmark = pytest.mark.process  # real servers, agents and trainers

BOOTED = time.time() - 3600.0
FIRST_BOOT = {"boot": {"id": "boot-one", "time": BOOTED}}
LATER_BOOT = {"boot": {"id": "boot-two", "time": time.time() - 5.0}}


PATH_RESUME = {"args": ["--resume", "--start-step", "{step}", "--from", "{path}"]}
"""``resume.args`` naming the checkpoint's path (contract 8.1): the offer names the path too."""


def restartable_job(**extra: Any) -> dict[str, Any]:
    """A train job whose trainer writes each checkpoint's file (the resume looks for it)."""
    args = ("--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", "--write-ckpt")
    return job("lm", *args, kind="train", **extra)


async def start_a_run_then_restart_the_machine(tmp_path: Path, **extra: Any) -> tuple[Path, Path, str, int]:
    """A run that reached a checkpoint; then its server ends, the machine "restarts" (a later boot)
    and its agent and trainer die together. Returns (workspace, hardware file, run id, its step)."""
    root = make_workspace(tmp_path / "ws", [restartable_job(**extra)])
    client, hardware = await fake_client(root, FIRST_BOOT)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        run_id = run["runId"]
        checkpointed = await wait_for(
            lambda: next(
                (s for s in client.statuses if s["runId"] == run_id and s.get("lastCheckpoint")), None
            ),
            what="a first checkpoint recorded",
        )
        pids = [checkpointed["pid"], checkpointed["agentPid"]]
    finally:
        await stop_server(client)
    write_fake_hardware(hardware, LATER_BOOT)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        wait_gone(pid)
    # The job's last checkpoint as the dead agent left it (a loaded machine may have let the trainer
    # announce a later one than the status above showed): what a resume starts from.
    record = StateFolder(root / ".aide" / "training").job_checkpoint("lm")
    assert record is not None and record.step >= checkpointed["lastCheckpoint"]["step"]
    return root, hardware, run_id, record.step


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pid: int) -> None:
    wait_until(lambda: gone(pid), what=f"process {pid} to be gone")


def run_of(status: dict[str, Any], run_id: str) -> dict[str, Any]:
    return next(run for run in status["runs"] if run["runId"] == run_id)


async def offered_run(client: ArenaClient, run_id: str) -> dict[str, Any]:
    """The run once a server has given its verdict (it adopts it as its first scan)."""
    run = await wait_status(client, run_id, "crashed", "lost")
    return run


def run_folders(root: Path) -> list[str]:
    return sorted(path.name for path in (root / ".aide" / "training" / "runs").iterdir() if path.is_dir())


async def test_with_ask_the_next_server_offers_the_resume_and_taking_it_resumes(tmp_path: Path) -> None:
    """The job resumes from the checkpoint's path: the offer names the path beside the step."""
    root, _, run_id, step = await start_a_run_then_restart_the_machine(tmp_path, resume=PATH_RESUME)
    record = StateFolder(root / ".aide" / "training").job_checkpoint("lm")
    assert record is not None and record.step == step and record.path
    asking, _ = await fake_client(root, LATER_BOOT)  # ``ask``: the default
    try:
        run = await offered_run(asking, run_id)
        assert run["status"] == "crashed", run
        assert run["failure"]["kind"] == "machine-restarted", run
        assert (
            "the machine restarted since the run started (boot id boot-one is now boot-two)"
            in run["failure"]["evidence"]
        )
        offer = run["afterReboot"]
        assert offer == {
            "policy": "ask", "step": step, "offer": f"Resume from step {step}",
            "resumedBy": None, "newerRun": None, "problem": None, "path": record.path,
        }  # fmt: skip
        status = await asking.call("arena/status", {})
        assert status["active"] is None and [r["runId"] for r in status["runs"]] == [run_id]
        # Taking the offer, as every client does: the job resumed at the offered step.
        taken = await asking.call("arena/start", {"id": "lm", "resume": True, "startStep": offer["step"]})
        resumed = await wait_status(asking, taken["runId"], "running")
        assert resumed["argv"][-5:] == ["--resume", "--start-step", str(step), "--from", record.path]
        status = await asking.call("arena/status", {})
        after = run_of(status, run_id)["afterReboot"]
        assert after["offer"] is None and after["newerRun"] == taken["runId"], after
        await asking.call("arena/stop", {"confirm": True})
    finally:
        await stop_server(asking)


async def test_with_resume_the_next_server_resumes_it_once_even_two_at_once(tmp_path: Path) -> None:
    root, _, run_id, step = await start_a_run_then_restart_the_machine(tmp_path)
    assert (root / f"ckpt-{step}.pt").exists()
    resume = {"watchdog": {"afterReboot": "resume"}}
    # Two servers come up together after the restart (an editor and the logon task): one resumes.
    first, second = await asyncio.gather(
        fake_client(root, LATER_BOOT, init_options=resume), fake_client(root, LATER_BOOT, init_options=resume)
    )
    clients = [first[0], second[0]]
    try:
        resumed_id = await wait_for(
            lambda: next((s["runId"] for c in clients for s in c.statuses if s["runId"] != run_id), None),
            what="the resumed run",
        )
        resumed = await wait_status(first[0], resumed_id, "running")
        assert resumed["argv"][-3:] == ["--resume", "--start-step", str(step)], resumed["argv"]
        assert resumed["resumedFromStep"] == step
        # The interrupted run's record names its resume once the resume's start has returned, a
        # moment after the resumed run is announced running (seconds on a loaded machine).
        crashed: dict[str, Any] = {}

        async def resume_recorded() -> bool:
            crashed.update(run_of(await first[0].call("arena/status", {}), run_id))
            return crashed["afterReboot"]["resumedBy"] is not None

        await poll_until(resume_recorded, "the interrupted run's record to name its resume", pause=0.2)
        assert crashed["status"] == "crashed" and crashed["failure"]["kind"] == "machine-restarted"
        assert crashed["afterReboot"]["resumedBy"] == resumed_id and crashed["afterReboot"]["offer"] is None
        await first[0].call("arena/stop", {"confirm": True})
    finally:
        for client in clients:
            await stop_server(client)
    assert run_folders(root) == sorted([run_id, resumed_id])  # no server runs now: nothing more can start
    # A restart of the server (a third one, with ``resume`` too): never resumes it again.
    third, _ = await fake_client(root, LATER_BOOT, init_options=resume)
    try:
        status = await third.call("arena/status", {})
        assert status["active"] is None
        assert run_of(status, run_id)["afterReboot"]["resumedBy"] == resumed_id
    finally:
        await stop_server(third)
    assert run_folders(root) == sorted([run_id, resumed_id])


async def test_the_same_boot_still_calls_the_run_lost(tmp_path: Path) -> None:
    """Agent and trainer gone without a restart (the same boot): ``lost``, as before, no offer."""
    root = make_workspace(tmp_path / "ws", [restartable_job()])
    client, _ = await fake_client(root, FIRST_BOOT)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        running = await wait_status(client, run["runId"], "running")
    finally:
        await stop_server(client)
    for pid in (running["pid"], running["agentPid"]):
        os.kill(pid, signal.SIGKILL)
        wait_gone(pid)
    again, _ = await fake_client(root, FIRST_BOOT, init_options={"watchdog": {"afterReboot": "resume"}})
    try:
        lost = await wait_status(again, run["runId"], "lost", "crashed")
        assert lost["status"] == "lost" and lost["failure"]["kind"] == "error", lost
        assert lost["afterReboot"] is None
    finally:
        await stop_server(again)


async def test_arena_resume_interrupted_offers_at_logon_then_resumes_once(tmp_path: Path) -> None:
    """What the logon entry runs, through the real ``arena`` and ``arena-ls`` (this machine's
    real boot is another boot than the fake one the run was launched in)."""
    root, _, run_id, recorded = await start_a_run_then_restart_the_machine(tmp_path)
    asked = await asyncio.to_thread(run_arena, root, "resume-interrupted")
    assert asked.returncode == 0, asked.stderr
    offered = re.search(
        rf"lm was interrupted by a restart of the machine \(run {run_id}\)\.[^?]*? Resume from step (\d+)",
        asked.stdout,
    )
    assert offered, asked.stdout
    step = offered.group(1)
    assert step == str(recorded)
    assert f"`arena start lm --start-step {step}`" in asked.stdout
    shown = await asyncio.to_thread(run_arena, root, "status")
    assert (
        "Interrupted by a restart of the machine" in shown.stdout
        and f"Resume from step {step}" in shown.stdout
    )
    resumed = await asyncio.to_thread(run_arena, root, "resume-interrupted", "--after-reboot", "resume")
    try:
        assert resumed.returncode == 0, resumed.stderr
        # The step the resume started from, verified (contract 8.2): the offered one, whole on disk.
        # (It once read the job's live last checkpoint, which the resumed run had moved on.)
        said = re.search(rf"run {run_id} resumed from step {step} as run (\S+)", resumed.stdout)
        assert said, resumed.stdout
        again = await asyncio.to_thread(run_arena, root, "resume-interrupted", "--after-reboot", "resume")
        assert again.returncode == 0 and "no run is waiting for a resume" in again.stdout, again.stdout
    finally:
        stopped = await asyncio.to_thread(run_arena, root, "stop", "--kill", "--confirm")
        assert stopped.returncode == 0, stopped.stderr
    runs = (await asyncio.to_thread(status_json, root))["runs"]
    assert sorted(run["runId"] for run in runs) == sorted([run_id, said.group(1)])
