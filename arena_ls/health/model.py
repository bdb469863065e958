"""What the hardware probes read, as frozen attrs classes.

Memory is in MB of 1024 * 1024 bytes (what ``nvidia-smi`` and most system
monitors call MiB), percentages are 0 to 100, temperatures degrees Celsius.
A value a device cannot report (utilisation of a GPU without the counter, a
process's GPU memory under Windows WDDM) is None, never a made-up zero.
"""

from __future__ import annotations

from datetime import datetime

import attrs

BYTES_PER_MB = 1024 * 1024


@attrs.frozen
class RamInfo:
    """Host memory."""

    total_mb: int
    available_mb: int
    """Memory a new process can get without swapping (psutil's ``available``)."""
    percent: float
    """Percent of the memory in use."""


@attrs.frozen
class CpuInfo:
    """Host processors."""

    percent: float
    """Utilisation of all CPUs since the previous reading."""
    count: int
    """Logical CPUs."""


@attrs.frozen
class BatteryInfo:
    """The battery of a laptop; desktops and servers have none."""

    percent: float
    plugged_in: bool | None
    """None when the operating system cannot tell the power source."""


@attrs.frozen
class GpuProcess:
    """A compute process holding a context on a GPU."""

    pid: int
    used_memory_mb: int | None
    """None when the driver does not report it (Windows WDDM)."""
    ours: bool = False
    """True when the process belongs to one of this workspace's runs."""


@attrs.frozen
class Gpu:
    """One GPU as NVML reports it."""

    index: int
    name: str
    utilization: int | None
    """Percent of the last sample period during which a kernel ran."""
    memory_used_mb: int
    memory_total_mb: int
    temperature: int | None
    compute_capability: tuple[int, int] | None
    """CUDA compute capability (major, minor), e.g. (8, 6) for Ampere."""
    processes: tuple[GpuProcess, ...] = ()
    slowdown_temperature: int | None = None
    """Where the GPU starts throttling (NVML_TEMPERATURE_THRESHOLD_SLOWDOWN); None when unknown."""


@attrs.frozen
class GpuReading:
    """Every GPU that could be read, and why the rest (or all) could not."""

    gpus: tuple[Gpu, ...] = ()
    error: str | None = None
    """None when every GPU was read; else why not (no NVIDIA driver, a GPU lost...)."""


@attrs.frozen
class Health:
    """One sample of the machine: the ``Health`` shape of the contract (4.1)."""

    at: datetime
    """When the sample was taken, timezone-aware UTC."""
    ram: RamInfo
    cpu: CpuInfo
    battery: BatteryInfo | None
    gpus: tuple[Gpu, ...]
    gpu_error: str | None


@attrs.frozen
class BootIdentity:
    """Which boot of the machine this is (contract 8.3: a restart under a run).

    ``boot_id`` is the kernel's id of the boot where there is one (Linux), else None;
    ``boot_time`` the boot's time in epoch seconds, None when unreadable. The time moves
    with the system clock, so it is only compared with a tolerance (``lifecycle/reboot.py``)."""

    boot_id: str | None
    boot_time: float | None
