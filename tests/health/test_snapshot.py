"""Health samples and their wire shape (contract 4.1 ``Health``)."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone

from arena_ls.health import health_to_wire, process_tree_pids, take_health
from arena_ls.health.model import BatteryInfo

from .support import FakeHardware, fake_gpu

HEALTH_KEYS = {"at", "ram", "cpu", "battery", "gpus", "gpuError"}
GPU_KEYS = {
    "index",
    "name",
    "utilization",
    "memoryUsedMb",
    "memoryTotalMb",
    "temperature",
    "computeCapability",
    "processes",
}


def test_wire_has_every_key_with_nulls() -> None:
    hw = FakeHardware(battery_info=None, gpu_error="NVIDIA driver not found (NVML: x)")

    wire = health_to_wire(take_health(hw, set()))

    assert set(wire) == HEALTH_KEYS
    assert set(wire["ram"]) == {"totalMb", "availableMb", "percent"}
    assert set(wire["cpu"]) == {"percent", "count"}
    assert wire["battery"] is None
    assert wire["gpus"] == []
    assert wire["gpuError"] == "NVIDIA driver not found (NVML: x)"


def test_wire_values_and_gpu_shape() -> None:
    gpu = fake_gpu(0, name="NVIDIA GeForce RTX 3090", capability=(8, 6), processes=[(4242, 3000), (77, None)])
    hw = FakeHardware(
        ram_total_mb=32000,
        ram_available_mb=8000,
        battery_info=BatteryInfo(57.0, False),
        gpu_list=[gpu],
    )

    wire = health_to_wire(take_health(hw, {4242}))

    assert wire["ram"] == {"totalMb": 32000, "availableMb": 8000, "percent": 75.0}
    assert wire["cpu"] == {"percent": 12.5, "count": 8}
    assert wire["battery"] == {"percent": 57.0, "pluggedIn": False}
    assert wire["gpuError"] is None
    (gpu_wire,) = wire["gpus"]
    assert set(gpu_wire) == GPU_KEYS
    assert gpu_wire["computeCapability"] == "8.6"
    assert gpu_wire["memoryUsedMb"] == 3000
    assert gpu_wire["processes"] == [
        {"pid": 4242, "usedMemoryMb": 3000, "ours": True},
        {"pid": 77, "usedMemoryMb": None, "ours": False},
    ]


def test_unknown_capability_is_null() -> None:
    hw = FakeHardware(gpu_list=[fake_gpu(0, capability=None, temperature=None, utilization=None)])

    (gpu_wire,) = health_to_wire(take_health(hw, set()))["gpus"]

    assert gpu_wire["computeCapability"] is None
    assert gpu_wire["temperature"] is None
    assert gpu_wire["utilization"] is None


def test_at_is_iso_utc_with_z() -> None:
    before = datetime.now(timezone.utc)
    wire = health_to_wire(take_health(FakeHardware(), set()))

    assert wire["at"].endswith("Z")
    parsed = datetime.fromisoformat(wire["at"].replace("Z", "+00:00"))
    assert parsed.tzinfo is not None
    assert parsed.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert abs((parsed - before).total_seconds()) < 3600


PARENT_OF_ONE = """
import subprocess, sys
waiter = [sys.executable, "-c", "import sys; sys.stdin.read()"]
child = subprocess.Popen(waiter, stdin=subprocess.PIPE)
print(child.pid, flush=True)
sys.stdin.read()
child.stdin.close()
child.wait()
"""
"""Starts a child that lives until our stdin closes, and prints its pid."""


def test_process_tree_pids_includes_children_and_tolerates_gone_roots() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_OF_ONE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        grandchild = int(parent.stdout.readline())

        pids = process_tree_pids([parent.pid, gone.pid])

        assert {parent.pid, grandchild, gone.pid} <= pids
    finally:
        assert parent.stdin is not None
        parent.stdin.close()
        parent.wait(timeout=60)
