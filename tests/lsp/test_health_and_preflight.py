"""Health in status and pre-flight refusals, through a real arena-ls.

GPUs and batteries that this machine lacks come from the fake hardware
(``tests/helpers/fake_server.py`` injects it); RAM, disk and NVML's absence
are real.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from arena_ls.health.snapshot import GPUS_NOT_READ_YET
from tests.helpers.fake_hardware import write_fake_hardware
from tests.helpers.lsp import (
    REPO,
    RESUME,
    ArenaClient,
    job,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

GOOD = (REPO / "training" / "train.py").read_text()
AUTOCAST = GOOD.replace(
    "    model.train()\n",
    "    model.train()\n    torch.autocast(device_type=device.type, dtype=torch.float16)\n",
    1,
)


def gpu(capability: str, processes: list[dict[str, int]] | None = None) -> dict[str, Any]:
    return {
        "index": 0,
        "name": "NVIDIA GeForce GTX 1060 6GB",
        "utilization": 30,
        "memoryUsedMb": 1200,
        "memoryTotalMb": 6144,
        "temperature": 55,
        "computeCapability": capability,
        "processes": processes or [],
    }


def machine(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "battery": {"percent": 80, "pluggedIn": True},
        "gpus": [gpu("6.1")],
        "gpuError": None,
    }
    data.update(overrides)
    return data


def trainer_job(job_id: str = "lm", **extra: Any) -> dict[str, Any]:
    spec = job(job_id, "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", kind="train")
    spec.update(extra)
    return spec


async def fake_client(root: Path, hardware: dict[str, Any], **kwargs: Any) -> tuple[ArenaClient, Path]:
    path = root.parent / "hardware.json"
    write_fake_hardware(path, hardware)
    env = {"ARENA_FAKE_HARDWARE": str(path), "PYTHONPATH": str(REPO)}
    client = await start_server(
        root, command=[sys.executable, "-m", "tests.helpers.fake_server"], env=env, **kwargs
    )
    return client, path


async def finish(client: ArenaClient) -> None:
    await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


def check(error_data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in error_data["checks"] if c["name"] == name)


async def test_a_foreign_gpu_process_refuses_then_warns(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    foreign = [{"pid": 999_999, "usedMemoryMb": 2048}]
    client, _ = await fake_client(root, machine(gpus=[gpu("6.1", foreign)]))
    try:
        error = await client.call_error("arena/start", {"id": "lm"})
        assert (error.code, error.data["reason"]) == (1005, "preflight-failed")
        contention = check(error.data, "gpu-contention")
        assert not contention["ok"] and "999999" in contention["message"] and "2048" in contention["message"]
        assert {c["name"] for c in error.data["checks"]} == {
            "power", "ram", "gpu-contention", "disk", "state-dir", "gates", "reboot-pending",
        }  # fmt: skip
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"arena": {"preflight": {"gpuContention": "warn"}}})
        )
        info = await wait_for_start(client, "lm")
        assert info["status"] == "running"
        await wait_for(lambda: any("999999" in m.message for m in client.log_messages), what="warning line")
    finally:
        await finish(client)


async def wait_for_start(client: ArenaClient, job_id: str) -> dict[str, Any]:
    """Start once the new settings are in (the notification and the request race): tried until
    the start is not refused by the pre-flight (1005), for ``WAIT`` seconds at most."""
    started: dict[str, Any] = {}

    async def start() -> bool:
        try:
            started.update(await client.call("arena/start", {"id": job_id}))
        except Exception as error:
            if getattr(error, "code", None) != 1005:
                raise
        return bool(started)

    await poll_until(start, "the setting to take effect (a start the pre-flight lets through)", pause=0.02)
    return started


async def test_our_trainer_is_marked_ours_with_its_memory(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    client, path = await fake_client(root, machine())
    try:
        info = await client.call("arena/start", {"id": "lm"})
        write_fake_hardware(path, machine(gpus=[gpu("6.1", [{"pid": info["pid"], "usedMemoryMb": 3100}])]))

        async def ours() -> bool:
            status = await client.call("arena/status", {})
            procs = status["health"]["gpus"][0]["processes"]
            return bool(procs) and procs[0]["ours"] is True and status["active"]["gpuMemoryMb"] == 3100

        await wait_async(ours)
    finally:
        await finish(client)


async def wait_async(condition: Any, attempts: int = 600) -> None:
    for _ in range(attempts):
        if await condition():
            return
    raise AssertionError("condition never held")


async def test_battery_refuses_and_mains_passes(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    client, path = await fake_client(root, machine(battery={"percent": 57, "pluggedIn": False}))
    try:
        error = await client.call_error("arena/start", {"id": "lm"})
        power = check(error.data, "power")
        assert not power["ok"] and "57" in power["message"]
        write_fake_hardware(path, machine())
        dry = await client.call("arena/start", {"id": "lm", "dryRun": True})
        assert next(c for c in dry["preflight"] if c["name"] == "power")["ok"]
    finally:
        await finish(client)


@pytest.mark.parametrize(("capability", "fires"), [("6.1", True), ("8.6", False)])
async def test_device_profile_drives_ar011(tmp_path: Path, capability: str, fires: bool) -> None:
    root = make_workspace(tmp_path / "ws", [])
    trainer = root / "train.py"
    trainer.write_text(AUTOCAST)
    client, _ = await fake_client(root, machine(gpus=[gpu(capability)]))
    try:
        uri = trainer.as_uri()
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "python", 1, AUTOCAST))
        )
        await wait_for(lambda: uri in client.diagnostics, what="diagnostics")
        assert ("AR011" in {d.code for d in client.diagnostics[uri]}) is fires
        status = await client.call("arena/status", {})
        assert ("FP32-only" in status["deviceProfile"]) is fires
    finally:
        await finish(client)


async def test_ram_and_disk_use_the_real_machine(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    huge = 10**9
    client = await start_server(
        root, init_options={"preflight": {"minFreeRamMb": huge, "minFreeDiskMb": huge}}
    )
    try:
        error = await client.call_error("arena/start", {"id": "lm"})
        ram, disk = check(error.data, "ram"), check(error.data, "disk")
        assert not ram["ok"] and str(huge) in ram["message"].replace(",", "")
        assert not disk["ok"] and str(huge) in disk["message"].replace(",", "")
        assert check(error.data, "state-dir")["ok"]
        runs = root / ".aide" / "training" / "runs"
        assert not runs.exists() or not list(runs.iterdir())
    finally:
        await finish(client)


async def test_no_nvml_is_a_normal_state(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    client = await start_server(root)
    try:
        status = await client.call("arena/status", {})
        assert status["health"]["gpus"] == []
        assert status["health"]["gpuError"]
        assert status["health"]["battery"] is None or "pluggedIn" in status["health"]["battery"]
    finally:
        await finish(client)
    assert "Traceback" not in capfd.readouterr().err


async def test_the_gpus_are_read_once_the_first_status_is_answered(tmp_path: Path) -> None:
    """The first status never waits for NVML's start (it begins once that status is answered:
    ``protocol/warmup.py``); the GPUs are read after it, and the status says what was found."""
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    client = await start_server(root)
    try:
        first = await client.call("arena/status", {})
        assert [job["id"] for job in first["jobs"]] == ["lm"]

        async def read() -> bool:
            status = await client.call("arena/status", {})
            return bool(status["health"]["gpuError"] != GPUS_NOT_READ_YET)

        await poll_until(read, "a status with the GPUs read")
        status = await client.call("arena/status", {})
        assert GPUS_NOT_READ_YET not in status["deviceProfile"]
    finally:
        await finish(client)


async def test_dry_run_reports_everything_and_starts_nothing(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [trainer_job(), job("task", "--steps", "1")])
    client, _ = await fake_client(root, machine())
    try:
        dry = await client.call("arena/start", {"id": "lm", "dryRun": True})
        assert dry["argv"][1:3] == ["fake_trainer.py", "--steps"]
        assert dry["cwd"] == str(root) and dry["gates"] == []
        assert [c["name"] for c in dry["preflight"]] == [
            "power",
            "ram",
            "gpu-contention",
            "disk",
            "state-dir",
            "gates",
            "reboot-pending",
        ]
        task = await client.call("arena/start", {"id": "task", "dryRun": True})
        assert [c["name"] for c in task["preflight"]] == ["state-dir", "disk"]
        assert not (root / ".aide" / "training" / "runs").exists() or not list(
            (root / ".aide" / "training" / "runs").iterdir()
        )
        assert (await client.call("arena/status", {}))["active"] is None
    finally:
        await finish(client)


@pytest.mark.parametrize("capabilities", ["visual-studio-code", "neovim"])
async def test_settings_changes_and_bad_values(tmp_path: Path, capabilities: str) -> None:
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    client = await start_server(
        root, capabilities=capabilities, init_options={"preflight": {"minFreeRamMb": "lots"}}
    )
    try:
        await wait_for(
            lambda: any("minFreeRamMb" in m.message for m in client.messages), what="bad value shown"
        )
        dry = await client.call("arena/start", {"id": "lm", "dryRun": True})
        assert next(c for c in dry["preflight"] if c["name"] == "ram")["ok"], "defaulted to 5120 MB"
        client.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"arena": {"preflight": {"minFreeRamMb": 10**9}}})
        )

        async def refused() -> bool:
            result = await client.call("arena/start", {"id": "lm", "dryRun": True})
            return not next(c for c in result["preflight"] if c["name"] == "ram")["ok"]

        await wait_async(refused)
        dry = await client.call("arena/start", {"id": "lm", "dryRun": True})
        assert dry["argv"][0] == sys.executable, "a partial change keeps the initialization options"
        info = json.dumps(await client.call("arena/status", {}))
        assert "health" in info
    finally:
        await finish(client)


async def test_a_task_job_skips_the_heavy_checks(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("task", "--steps", "1", resume=RESUME)])
    client, _ = await fake_client(root, machine(battery={"percent": 5, "pluggedIn": False}))
    try:
        info = await client.call("arena/start", {"id": "task"})
        final = await wait_status(client, info["runId"], "succeeded")
        assert final["exitCode"] == 0
    finally:
        await finish(client)


async def test_a_new_server_marks_the_adopted_trainer_ours_from_its_first_answer(tmp_path: Path) -> None:
    """Seen on a real H200: a new server's first sample predates its adoption of the run, and
    its first ``arena/status`` called the run's own trainer a foreign GPU process."""
    root = make_workspace(tmp_path / "ws", [trainer_job()])
    first, _ = await fake_client(root, machine())
    try:
        info = await first.call("arena/start", {"id": "lm"})
    finally:
        await stop_server(first)  # the run goes on
    on_gpu = machine(gpus=[gpu("6.1", [{"pid": info["pid"], "usedMemoryMb": 3100}])])
    second, _ = await fake_client(root, on_gpu)
    try:
        status = await second.call("arena/status", {})
        assert status["active"]["runId"] == info["runId"]
        assert status["health"]["gpus"][0]["processes"] == [
            {"pid": info["pid"], "usedMemoryMb": 3100, "ours": True}
        ]
    finally:
        await finish(second)
