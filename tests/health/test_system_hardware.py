"""The real machine through psutil and NVML (this test machine has no NVIDIA driver)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest

from arena_ls.health import SystemHardware
from arena_ls.health.hardware import nearest_existing


def nvml_library_loads() -> bool:
    name = "nvml.dll" if sys.platform == "win32" else "libnvidia-ml.so.1"
    try:
        ctypes.CDLL(name)
    except OSError:
        return False
    return True


HAS_NVML = nvml_library_loads()


@pytest.mark.skipif(HAS_NVML, reason="an NVIDIA driver is installed here")
def test_without_a_driver_gpus_are_empty_with_a_reason() -> None:
    hw = SystemHardware()

    first = hw.gpus()
    second = hw.gpus()

    assert first.gpus == ()
    assert first.error is not None
    assert first.error.startswith("NVIDIA driver not found (NVML: ")
    assert second == first


@pytest.mark.skipif(not HAS_NVML, reason="no NVIDIA driver here")
def test_with_a_driver_every_gpu_is_read() -> None:
    hw = SystemHardware()
    try:
        reading = hw.gpus()
    finally:
        hw.close()

    assert reading.gpus, reading.error
    for gpu in reading.gpus:
        assert gpu.memory_total_mb > 0
        assert 0 <= gpu.memory_used_mb <= gpu.memory_total_mb
        assert gpu.name


def test_ram_cpu_and_battery_are_plausible() -> None:
    hw = SystemHardware()

    ram = hw.ram()
    cpu = hw.cpu()
    battery = hw.battery()

    assert ram.total_mb > 0
    assert 0 <= ram.available_mb <= ram.total_mb
    assert 0.0 <= ram.percent <= 100.0
    assert cpu.count >= 1
    assert 0.0 <= cpu.percent <= 100.0 * cpu.count
    if battery is not None:
        assert 0.0 <= battery.percent <= 100.0


def test_disk_free_of_a_path_that_does_not_exist_yet(tmp_path: Path) -> None:
    hw = SystemHardware()

    missing = tmp_path / "a" / "b" / "c"

    assert nearest_existing(missing) == tmp_path
    assert hw.disk_free_mb(missing) > 0


def test_closed_probe_reports_an_error() -> None:
    hw = SystemHardware()
    hw.gpus()
    hw.close()

    reading = hw.gpus()

    assert reading.gpus == ()
    assert reading.error
