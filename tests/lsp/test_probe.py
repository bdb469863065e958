"""The VRAM probe through a real arena-ls: 1010 until a probe of the current trainer passed,
rejected above probe.maxVramMb, accepted within it, and without a GPU only when waived.

The probe's trainer lists itself on the fake GPU (``--fake-gpu FILE MB``), so the
memory the server reads through the injected hardware is that of the run's own process.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from lsprotocol import types

from tests.helpers.fake_hardware import write_fake_hardware
from tests.helpers.lsp import (
    REPO,
    RESUME,
    ArenaClient,
    make_workspace,
    start_server,
    stop_server,
    wait_for,
    write_manifest,
)
from tests.lsp.test_insights import INSIGHT_TRAINER, poll_until

FINAL = ("succeeded", "crashed", "stopped", "lost")
NO_GPU = {"gpus": [], "gpuError": "NVIDIA driver not found (test)"}


def probe_job(hardware: Path, megabytes: int, **probe: Any) -> dict[str, Any]:
    return {
        "id": "lm",
        "kind": "train",
        "command": "{python}",
        "args": ["insight_trainer.py", "--ckpt-every", "5"],
        "script": "insight_trainer.py",
        "status": "ready",
        "resume": RESUME,
        "probe": {
            "args": ["insight_trainer.py", "--steps", "30", "--interval", "0.03",
                     "--fake-gpu", str(hardware), str(megabytes)],
            **probe,
        },
    }  # fmt: skip


async def fake_client(
    tmp_path: Path, megabytes: int, machine: dict[str, Any], contention: str = "off"
) -> tuple[ArenaClient, Path]:
    hardware = tmp_path / "hardware.json"
    write_fake_hardware(hardware, machine)
    root = make_workspace(tmp_path / "ws", [probe_job(hardware, megabytes, required=True)])
    shutil.copy(INSIGHT_TRAINER, root / "insight_trainer.py")
    client = await start_server(
        root,
        command=[sys.executable, "-m", "tests.helpers.fake_server"],
        env={"ARENA_FAKE_HARDWARE": str(hardware), "PYTHONPATH": str(REPO)},
        init_options={"probe": {"sampleSeconds": 0.05}, "preflight": {"gpuContention": contention}},
    )
    return client, root


async def job_probe(client: ArenaClient) -> Any:
    status = await client.call("arena/status", {})
    return next(j for j in status["jobs"] if j["id"] == "lm")["probe"]


async def probe_verdict(client: ArenaClient) -> dict[str, Any]:
    """Run a probe and wait for its (new) verdict in ``JobInfo.probe``."""
    before = await job_probe(client)
    run = await client.call("arena/start", {"id": "lm", "probe": True})
    assert run["jobId"] == "lm.probe" and run["status"] in ("starting", "running", "succeeded")
    # The editors learn that the probe ended from arena/statusChanged alone (no arena/status
    # meanwhile, which would announce it too), then read the verdict.
    ended = await wait_for(lambda: [s for s in client.status_of(run["runId"]) if s in FINAL], what="its end")
    assert ended[0] == "succeeded", client.status_of(run["runId"])
    verdict: dict[str, Any] = {}

    async def recorded() -> bool:
        nonlocal verdict
        verdict = await job_probe(client) or {}
        return bool(verdict) and verdict != before

    await poll_until(recorded, "the probe's verdict")
    return verdict


async def test_a_required_probe_refuses_rejects_a_spill_and_accepts_a_fit(tmp_path: Path) -> None:
    client, root = await fake_client(tmp_path, 6000, {"gpus": [], "gpuError": None})
    try:
        assert await job_probe(client) is None
        error = await client.call_error("arena/start", {"id": "lm"})
        assert (error.code, error.data["reason"], error.data["probe"]) == (1010, "probe-required", None)
        rejected = await probe_verdict(client)
        assert rejected["ok"] is False and rejected["peakVramMb"] == 6000
        assert "5120 MB" in rejected["message"] and rejected["at"].endswith("Z")
        error = await client.call_error("arena/start", {"id": "lm"})
        assert error.code == 1010 and error.data["probe"]["ok"] is False
        write_manifest(root, [probe_job(tmp_path / "hardware.json", 3000, required=True)])
        accepted = await probe_verdict(client)
        assert accepted == {**accepted, "ok": True, "peakVramMb": 3000}
        run = await client.call("arena/start", {"id": "lm"})
        assert run["jobId"] == "lm" and run["status"] in ("starting", "running")
        await client.call("arena/stop", {"kill": True, "confirm": True})
        trainer = root / "insight_trainer.py"
        trainer.write_text(trainer.read_text() + "\n# edited after the probe\n")
        assert await job_probe(client) is None  # the verdict was for the old content
        error = await client.call_error("arena/start", {"id": "lm"})
        assert error.code == 1010
    finally:
        await stop_server(client)


async def test_without_a_gpu_the_probe_fails_unless_waived(tmp_path: Path) -> None:
    client, _ = await fake_client(tmp_path, 100, NO_GPU)
    hardware = tmp_path / "hardware.json"
    try:
        job = probe_job(hardware, 100)
        job["probe"]["args"] = job["probe"]["args"][:-3]  # this trainer never touches the GPU
        write_manifest(tmp_path / "ws", [job])
        failed = await probe_verdict(client)
        assert failed["ok"] is False and failed["peakVramMb"] is None
        assert "no GPU could be read" in failed["message"] and "allowWithoutGpu" in failed["message"]
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"arena": {"probe": {"allowWithoutGpu": True}}})
        )
        waived = await probe_verdict_after_change(client, failed)
        assert waived["ok"] is True and "waived" in waived["message"]
    finally:
        await stop_server(client)


async def probe_verdict_after_change(client: ArenaClient, previous: dict[str, Any]) -> dict[str, Any]:
    """Probe again until the new verdict (the setting and the next probe race) differs."""
    for _ in range(20):
        await wait_idle(client)
        verdict = await probe_verdict(client)
        if verdict["ok"]:
            return verdict
    raise AssertionError(f"the waiver never took effect: {previous}")


async def wait_idle(client: ArenaClient) -> None:
    async def idle() -> bool:
        status = await client.call("arena/status", {})
        return status["active"] is None

    await poll_until(idle, "no active run")


async def test_a_probe_dry_run_starts_nothing_and_answers_the_probes_command_line(tmp_path: Path) -> None:
    client, root = await fake_client(tmp_path, 3000, {"gpus": [], "gpuError": None})
    try:
        preview = await client.call("arena/start", {"id": "lm", "probe": True, "dryRun": True})
        assert preview.keys() == {"argv", "cwd", "gates", "preflight"}, preview
        assert preview["argv"][1:4] == ["insight_trainer.py", "--steps", "30"], (
            "the probe's args, not the job's"
        )
        assert "--fake-gpu" in preview["argv"] and preview["cwd"] == str(root)
        status = await client.call("arena/status", {})
        assert status["active"] is None and status["runs"] == [], "nothing was started"
        assert not (root / ".aide" / "training" / "runs").exists() or not any(
            (root / ".aide" / "training" / "runs").iterdir()
        )
    finally:
        await stop_server(client)


async def test_a_probe_logs_the_preflight_warnings_a_start_would(tmp_path: Path) -> None:
    foreign = {"index": 0, "name": "GPU", "utilization": 30, "memoryUsedMb": 2048, "memoryTotalMb": 6144,
               "computeCapability": "6.1", "processes": [{"pid": 999_999, "usedMemoryMb": 2048}]}  # fmt: skip
    client, _ = await fake_client(tmp_path, 3000, {"gpus": [foreign], "gpuError": None}, contention="warn")
    try:
        run = await client.call("arena/start", {"id": "lm", "probe": True})
        assert run["jobId"] == "lm.probe"
        await wait_for(
            lambda: any("warning:" in m.message and "999999" in m.message for m in client.log_messages),
            what="the gpu-contention warning in the probe's log",
        )
    finally:
        await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)
