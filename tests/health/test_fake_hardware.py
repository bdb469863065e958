"""The fake machine itself: JSON configuration and re-reading the file mid-run."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_ls.health import Hardware, health_to_wire, take_health
from arena_ls.health.model import BatteryInfo, GpuProcess

from .support import ENV_VAR, FakeHardware, write_fake_hardware

MACHINE = {
    "ram": {"totalMb": 16000, "availableMb": 4000},
    "cpu": {"percent": 50, "count": 4},
    "battery": {"percent": 57, "pluggedIn": False},
    "gpus": [
        {
            "name": "NVIDIA GeForce GTX 1080",
            "memoryTotalMb": 8192,
            "computeCapability": "6.1",
            "processes": [{"pid": 4242, "usedMemoryMb": 3120}, [77, None]],
        }
    ],
    "diskFreeMb": 900,
}


def test_it_satisfies_the_protocol() -> None:
    hw: Hardware = FakeHardware()

    assert hw.gpus().gpus == ()


def test_from_dict() -> None:
    hw = FakeHardware.from_dict(MACHINE)

    assert hw.ram().available_mb == 4000
    assert hw.ram().percent == 75.0
    assert hw.cpu().count == 4
    assert hw.battery() == BatteryInfo(57.0, False)
    (gpu,) = hw.gpus().gpus
    assert gpu.compute_capability == (6, 1)
    assert gpu.memory_used_mb == 3120
    assert gpu.processes == (GpuProcess(4242, 3120), GpuProcess(77, None))
    assert hw.disk_free_mb(Path("/anywhere")) == 900


def test_from_env_rereads_the_file_on_every_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "machine.json"
    write_fake_hardware(path, MACHINE)
    monkeypatch.setenv(ENV_VAR, str(path))
    hw = FakeHardware.from_env()
    assert health_to_wire(take_health(hw, {4242}))["battery"] == {
        "percent": 57.0,
        "pluggedIn": False,
    }

    write_fake_hardware(path, {**MACHINE, "battery": None, "gpus": []})

    assert hw.battery() is None
    assert hw.gpus().gpus == ()


def test_a_torn_file_keeps_the_last_machine(tmp_path: Path) -> None:
    path = tmp_path / "machine.json"
    write_fake_hardware(path, MACHINE)
    hw = FakeHardware.from_file(path)

    path.write_text('{"ram": ', encoding="utf-8")

    assert hw.ram().available_mb == 4000


def test_from_env_without_the_variable_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)

    with pytest.raises(RuntimeError, match=ENV_VAR):
        FakeHardware.from_env()
