"""Time to resume: kill -9 the reference trainer mid-run, and time until it trains again.

The reference trainer (``training/train.py``, CPU, ``OMP_NUM_THREADS=1``)
runs under a real ``arena-ls`` and its agent with ``backoffSeconds: 0`` (the
manifest's default of 5 s would add exactly that to every figure). Once it
has saved a checkpoint past the step it last resumed from, the benchmark
kills the trainer with SIGKILL, as the kernel's OOM killer does, and reads:

- ``downtime_s``: the agent's own figure (``RunInfo.relaunches[].downtimeSeconds``):
  from the end of the killed trainer to the relaunched trainer's first
  progress, its start-up (Python, torch, the model, the checkpoint's load)
  included;
- ``kill_to_progress_s``: the same, seen from outside: from the ``kill`` to
  the first ``arena/log`` line of the new trainer's progress;
- ``trainer_startup_s``: the trainer alone, outside arena-ls, from its spawn
  to its first progress line, resuming the same checkpoint;
- ``crash_to_relaunch_s``: per kill, from the end of the killed trainer to
  the relaunch's ``starting`` line (both the agent's clock): what arena-ls
  adds (noticing the exit, killing what is left of the tree, the GPU check,
  the relaunch decision and its records, the spawn); the goal is under 5 s;
- ``relaunched_startup_s``: the rest of the downtime, the relaunched
  trainer's own start-up inside the run (to compare with ``trainer_startup_s``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks import arena, harness
from benchmarks.client import BenchClient
from benchmarks.harness import Section

TRAINING = harness.REPO / "training"
ARGS = ["--steps", "100000", "--ckpt-every", "10", "--log-every", "1", "--eval-every", "100000"]
WAIT = 120.0


def job() -> dict[str, Any]:
    return {
        "id": "tiny-lm",
        "name": "reference trainer",
        "kind": "train",
        "command": "{python}",
        "args": ["training/train.py", *ARGS],
        "script": "training/train.py",
        "env": {"OMP_NUM_THREADS": "1"},
        "status": "ready",
        "resume": {"args": ["--resume", "--start-step", "{step}"]},
        "restart": {"maxRestarts": 3, "backoffSeconds": 0},
    }


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    kills = repeats or (2 if quick else 7)
    section = Section("resume", "time to resume: kill -9 of the reference trainer, until it trains again")
    section.facts["kills"] = kills
    section.facts["backoffSeconds"] = 0
    section.facts["load_before"] = [round(x, 1) for x in os.getloadavg()]
    with harness.workspace([job()], prefix="arena-resume-") as root:
        shutil.copytree(TRAINING / "data", root / "training" / "data")
        shutil.copy(TRAINING / "train.py", root / "training" / "train.py")
        asyncio.run(_kills(root, kills, section))
        for _ in range(kills):
            section.figure("trainer_startup_s", "s").add(_startup(root))
    section.facts["load_after"] = [round(x, 1) for x in os.getloadavg()]
    return [section]


async def _kills(root: Path, kills: int, section: Section) -> None:
    async with arena.session(root) as client:
        await arena.settled(client)
        info = await client.call("arena/start", {"id": "tiny-lm", "approved": True})
        run_id = info["runId"]
        try:
            for index in range(kills):
                await _kill_once(client, run_id, index, section)
        finally:
            await client.call("arena/stop", {"runId": run_id, "kill": True, "confirm": True})


async def _kill_once(client: BenchClient, run_id: str, index: int, section: Section) -> None:
    current = await _saved_past_resume(client, run_id)
    pid = current["pid"]
    progressed = asyncio.get_running_loop().create_future()

    relaunched: list[str] = []
    """The ``at`` of the relaunch's ``starting`` line, once seen."""

    def new_progress(at: float, params: dict[str, Any]) -> None:
        """The first progress line after the relaunch's ``starting`` line: lines of the killed
        trainer may still be in flight, and the log's order tells them apart."""
        for line in params.get("lines") or []:
            if line.get("stream") == "arena" and str(line.get("text", "")).startswith("starting "):
                relaunched.append(str(line.get("at")))
            elif relaunched and not progressed.done() and _progress_line(line):
                progressed.set_result(at)

    client.on_log = new_progress
    killed_at = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    resumed = await _relaunched(client, run_id, index + 1)
    record = resumed["relaunches"][index]
    section.figure("downtime_s", "s").add(record["downtimeSeconds"])
    arrived = await asyncio.wait_for(progressed, WAIT)
    spawn = _epoch(relaunched[0]) - _epoch(record["crashedAt"])
    section.figure("crash_to_relaunch_s", "s", "< 5").add(spawn)
    section.figure("relaunched_startup_s", "s").add(record["downtimeSeconds"] - spawn)
    section.figure("kill_to_progress_s", "s").add(arrived - killed_at)
    client.on_log = None


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _progress_line(line: dict[str, Any]) -> bool:
    return line.get("stream") == "stdout" and str(line.get("text", "")).startswith(
        '@arena {"event": "progress"'
    )


async def _saved_past_resume(client: BenchClient, run_id: str) -> dict[str, Any]:
    """The run once its trainer saved a checkpoint after the last relaunch's step (the budget of
    relaunches is then whole again, and a kill loses at most 10 steps)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        info = await _run(client, run_id)
        relaunches = info.get("relaunches") or []
        floor = relaunches[-1]["fromStep"] if relaunches else -1
        checkpoint = info.get("lastCheckpoint") or {}
        if info["status"] == "running" and info.get("pid") and (checkpoint.get("step") or -1) > floor:
            return info
        await asyncio.sleep(0.1)
    raise TimeoutError("the trainer saved no checkpoint in time")


async def _relaunched(client: BenchClient, run_id: str, count: int) -> dict[str, Any]:
    """The run once its ``count``-th relaunch has a downtime (its trainer announced progress)."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        info = await _run(client, run_id)
        relaunches = info.get("relaunches") or []
        if len(relaunches) >= count and relaunches[count - 1].get("downtimeSeconds") is not None:
            return info
        if info["status"] in arena.FINAL:
            raise RuntimeError(f"the run ended {info['status']}: {info.get('failure')}")
        await asyncio.sleep(0.05)
    raise TimeoutError("the relaunched trainer announced no progress in time")


async def _run(client: BenchClient, run_id: str) -> dict[str, Any]:
    status = await client.call("arena/status", {})
    return next(run for run in status["runs"] if run["runId"] == run_id)


def _startup(root: Path) -> float:
    """The reference trainer alone: spawn to first progress line, resuming its latest checkpoint."""
    ckpt_dir = root / "checkpoints" / "tiny-lm"
    step = _checkpoint_step(ckpt_dir)
    argv = [sys.executable, "-u", "training/train.py", *ARGS, "--ckpt-dir", str(root / "startup-ckpt")]
    shutil.rmtree(root / "startup-ckpt", ignore_errors=True)
    shutil.copytree(ckpt_dir, root / "startup-ckpt")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    process = subprocess.Popen(
        [*argv, "--resume", "--start-step", str(step)],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith('@arena {"event": "progress"'):
                return time.perf_counter() - started
        raise RuntimeError(f"the trainer exited with {process.wait()} before any progress")
    finally:
        process.kill()
        process.wait()


def _checkpoint_step(ckpt_dir: Path) -> int:
    """The step saved in the trainer's latest checkpoint (what a resume must name)."""
    code = "import sys, torch; print(torch.load(sys.argv[1], map_location='cpu', weights_only=False)['step'])"
    out = subprocess.run(
        [sys.executable, "-c", code, str(ckpt_dir / "ckpt_latest.pt")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    for result in run(quick="--quick" in sys.argv):
        result.print()
        samples = result.figures["downtime_s"].samples
        if samples:
            print(f"   downtime median {statistics.median(samples):.2f} s", flush=True)
