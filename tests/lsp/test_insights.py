"""Run insights through a real arena-ls over stdio: each appears on a run that shows its signal,
then clears when the signal stops; the reference trainer's normal run shows none.

Trainers are real subprocesses (``tests/fixtures/trainers/insight_trainer.py``);
GPU utilisation, memory and temperature come from the fake hardware.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.fake_hardware import write_fake_hardware
from tests.helpers.lsp import (
    REPO,
    RESUME,
    ArenaClient,
    kill_server,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_for,
)

INSIGHT_TRAINER = REPO / "tests" / "fixtures" / "trainers" / "insight_trainer.py"
FAST = {"lossSpikeHoldSeconds": 1, "gradWarmupSteps": 0}


def insight_job(*args: str, job_id: str = "lm", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "id": job_id,
        "kind": "train",
        "command": "{python}",
        "args": ["insight_trainer.py", *args],
        "script": "insight_trainer.py",
        "status": "ready",
        "resume": RESUME,
        "restart": {"maxRestarts": 0},
    }
    spec.update(extra)
    return spec


def workspace(tmp_path: Path, *args: str, **extra: Any) -> Path:
    root = make_workspace(tmp_path / "ws", [insight_job(*args, **extra)])
    shutil.copy(INSIGHT_TRAINER, root / "insight_trainer.py")
    return root


async def client_for(root: Path, insights: dict[str, Any], **kwargs: Any) -> ArenaClient:
    options = {"insights": insights, "preflight": {"minFreeRamMb": 0, "requirePluggedIn": False}}
    return await start_server(root, init_options=options, **kwargs)


async def insights_of(client: ArenaClient, run_id: str) -> dict[str, dict[str, Any]]:
    status = await client.call("arena/status", {})
    run = next(r for r in status["runs"] if r["runId"] == run_id)
    return {i["kind"]: i for i in run["insights"]}


async def wait_insights(client: ArenaClient, run_id: str, check: Any, what: str) -> dict[str, Any]:
    """Poll ``arena/status`` until ``check(insights by kind)`` holds."""
    latest: dict[str, Any] = {}

    async def poll() -> bool:
        nonlocal latest
        latest = await insights_of(client, run_id)
        return bool(check(latest))

    await poll_until(poll, f"{what} (last seen: {latest})")
    return latest


def changed_kinds(client: ArenaClient, run_id: str) -> set[str]:
    """Every insight kind any ``arena/statusChanged`` of the run carried."""
    return {i["kind"] for s in client.statuses if s["runId"] == run_id for i in s.get("insights", [])}


async def finish(client: ArenaClient) -> None:
    await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


async def test_a_loss_spike_appears_warns_once_and_clears(tmp_path: Path) -> None:
    root = workspace(tmp_path, "--spike-at", "40", "--interval", "0.05")
    client = await client_for(root, FAST)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        assert run["insights"] == []
        spike = (await wait_insights(client, run["runId"], lambda i: "loss-spike" in i, "a spike"))[
            "loss-spike"
        ]
        assert spike["severity"] == "warning" and "step 40" in spike["message"]
        assert spike["since"].endswith("Z") and "learning rate" in spike["message"]
        await wait_for(lambda: "loss-spike" in changed_kinds(client, run["runId"]), what="statusChanged")
        await wait_insights(client, run["runId"], lambda i: "loss-spike" not in i, "the spike clearing")
        warnings = [m.message for m in client.messages if "loss-spike" in m.message]
        assert len(warnings) == 1, warnings
        metrics = await client.call("arena/metrics", {"runId": run["runId"]})
        assert metrics["points"][0]["gradNorm"] == 1.0 and metrics["points"][0]["clipFraction"] == 0.0
    finally:
        await finish(client)


async def test_a_clip_fraction_of_20_percent_is_grad_health_until_it_stops(tmp_path: Path) -> None:
    root = workspace(tmp_path, "--clip", "0.2", "--clip-until", "60", "--interval", "0.05")
    client = await client_for(root, FAST)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        found = await wait_insights(client, run["runId"], lambda i: "grad-health" in i, "grad-health")
        assert "20%" in found["grad-health"]["message"]
        await wait_insights(client, run["runId"], lambda i: "grad-health" not in i, "grad-health clearing")
        assert any("grad-health" in m.message for m in client.messages)
        metrics = await client.call("arena/metrics", {"runId": run["runId"]})
        assert metrics["points"][0]["clipFraction"] == 0.2
    finally:
        await finish(client)


async def test_a_trainer_that_stops_checkpointing_is_overdue_until_it_saves_again(tmp_path: Path) -> None:
    root = workspace(tmp_path, "--ckpt-every", "5", "--ckpt-pause", "11", "60", "--interval", "0.05")
    client = await client_for(root, FAST)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        found = await wait_insights(
            client, run["runId"], lambda i: "checkpoint-overdue" in i, "checkpoint-overdue"
        )
        assert "step 10" in found["checkpoint-overdue"]["message"]
        await wait_insights(
            client, run["runId"], lambda i: "checkpoint-overdue" not in i, "the overdue clearing"
        )
    finally:
        await finish(client)


def gpu_machine(pid: int | None, *, utilization: int, memory: int, temperature: int) -> dict[str, Any]:
    processes = [{"pid": pid, "usedMemoryMb": memory}] if pid else []
    return {
        "gpus": [
            {
                "name": "NVIDIA GeForce GTX 1060 6GB",
                "utilization": utilization,
                "memoryTotalMb": 6144,
                "temperature": temperature,
                "slowdownTemperature": 85,
                "computeCapability": "6.1",
                "processes": processes,
            }
        ],
        "gpuError": None,
    }


async def test_gpu_insights_from_the_fake_gpu_appear_and_clear(tmp_path: Path) -> None:
    root = workspace(tmp_path, "--ckpt-every", "20", probe={"maxVramMb": 5120})
    path = tmp_path / "hardware.json"
    write_fake_hardware(path, gpu_machine(None, utilization=0, memory=0, temperature=40))
    env = {"ARENA_FAKE_HARDWARE": str(path), "PYTHONPATH": str(REPO)}
    quick = {**FAST, "gpuBubbleWarmupSeconds": 0.1, "gpuBubbleWindowSeconds": 4}
    client = await client_for(
        root, quick, command=[sys.executable, "-m", "tests.helpers.fake_server"], env=env
    )
    try:
        run = await client.call("arena/start", {"id": "lm"})
        hot = gpu_machine(run["pid"], utilization=12, memory=5600, temperature=90)
        write_fake_hardware(path, hot)
        kinds = {"gpu-bubble", "vram-spill", "thermal"}
        found = await wait_insights(client, run["runId"], lambda i: kinds <= set(i), "the GPU insights")
        assert "5600 MB" in found["vram-spill"]["message"] and "5120 MB" in found["vram-spill"]["message"]
        assert "90 °C" in found["thermal"]["message"] and "85 °C" in found["thermal"]["message"]
        assert "12%" in found["gpu-bubble"]["message"]
        write_fake_hardware(path, gpu_machine(run["pid"], utilization=99, memory=3000, temperature=60))
        await wait_insights(client, run["runId"], lambda i: not (kinds & set(i)), "the GPU insights clearing")
    finally:
        await finish(client)


async def test_the_reference_trainers_normal_run_shows_no_insight(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    root = tmp_path / "ws"
    (root / "training").mkdir(parents=True)
    shutil.copy(REPO / "training" / "train.py", root / "training" / "train.py")
    shutil.copytree(REPO / "training" / "data", root / "training" / "data")  # paths stay inside (AR110)
    args = ["training/train.py", "--steps", "60", "--batch-size", "4", "--log-every", "5",
            "--ckpt-every", "20", "--eval-every", "20", "--sample-chars", "0", "--device", "cpu",
            "--data", "training/data/corpus.txt"]  # fmt: skip
    job = {"id": "tiny", "kind": "train", "command": "{python}", "args": args, "status": "ready",
           "resume": RESUME, "env": {"OMP_NUM_THREADS": "1"}}  # fmt: skip
    (root / "training" / "manifest.json").write_text(__import__("json").dumps({"version": 1, "jobs": [job]}))
    client = await client_for(root, {})
    try:
        run = await client.call("arena/start", {"id": "tiny"})
        seen: set[str] = set()

        async def finished() -> bool:
            seen.update(await insights_of(client, run["runId"]))
            status = await client.call("arena/status", {})
            return any(r["runId"] == run["runId"] and r["status"] == "succeeded" for r in status["runs"])

        await poll_until(finished, "the reference run to finish", timeout=300)
        assert seen == set() and changed_kinds(client, run["runId"]) == set()
        metrics = await client.call("arena/metrics", {"runId": run["runId"]})
        with_health = {p["step"] for p in metrics["points"] if p["gradNorm"] is not None}
        assert with_health == set(range(5, 61, 5))
    finally:
        await stop_server(client)


async def test_a_new_server_rebuilds_the_insights_from_the_runs_log(tmp_path: Path) -> None:
    """Observations come from the run folder: a server started after a kill -9 sees the same history."""
    root = workspace(
        tmp_path, "--steps", "600", "--ckpt-every", "5", "--ckpt-pause", "11", "100000", "--interval", "0.05"
    )  # ends by itself in about 30 s, even if the test fails between the two servers
    client = await client_for(root, FAST)
    second: ArenaClient | None = None
    try:
        run = await client.call("arena/start", {"id": "lm"})
        await wait_insights(client, run["runId"], lambda i: "checkpoint-overdue" in i, "checkpoint-overdue")
        await kill_server(client)
        second = await client_for(root, FAST)
        found = await wait_insights(
            second, run["runId"], lambda i: "checkpoint-overdue" in i, "checkpoint-overdue after a restart"
        )
        assert "step 10" in found["checkpoint-overdue"]["message"]
    finally:
        survivor = second or client
        if not survivor.stopped:
            await finish(survivor)
