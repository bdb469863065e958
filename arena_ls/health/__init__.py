"""RAM, CPU, battery and GPU probes, health samples and pre-flight checks.

No LSP here: the server calls these plain functions and puts their results on
the wire. Hardware is read only through :class:`Hardware`, so tests can inject
a fake.
"""

from __future__ import annotations

from arena_ls.health.device import describe_device_profile, fp32_only
from arena_ls.health.hardware import Hardware, SystemHardware
from arena_ls.health.model import (
    BatteryInfo,
    CpuInfo,
    Gpu,
    GpuProcess,
    GpuReading,
    Health,
    RamInfo,
)
from arena_ls.health.preflight import Check, check_to_wire, run_preflight, wait_gpu_released
from arena_ls.health.sampler import HealthSampler
from arena_ls.health.snapshot import health_to_wire, mark_ours, process_tree_pids, take_health

__all__ = [
    "BatteryInfo",
    "Check",
    "CpuInfo",
    "Gpu",
    "GpuProcess",
    "GpuReading",
    "Hardware",
    "Health",
    "HealthSampler",
    "RamInfo",
    "SystemHardware",
    "check_to_wire",
    "describe_device_profile",
    "fp32_only",
    "health_to_wire",
    "mark_ours",
    "process_tree_pids",
    "run_preflight",
    "take_health",
    "wait_gpu_released",
]
