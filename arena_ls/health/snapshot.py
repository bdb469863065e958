"""One health sample of the machine, and its wire form (contract 4.1 ``Health``)."""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from datetime import datetime, timezone
from typing import Any

import attrs

from arena_ls.health.hardware import Hardware
from arena_ls.health.model import BatteryInfo, Gpu, GpuReading, Health
from arena_ls.platform import tree_pids
from arena_ls.timeutil import iso_utc_moment

GPUS_NOT_READ_YET = "the GPUs are being read for the first time"
"""``gpuError`` of the first sample of a server, taken before NVML has started (it starts on the
sampler's thread, so that the first status does not wait for it)."""


def take_health(hw: Hardware, our_pids: AbstractSet[int], *, gpus: bool = True) -> Health:
    """Read the machine once; GPU processes whose pid is in ``our_pids`` are marked ours.

    ``our_pids`` should hold every process of every process tree of this
    workspace's runs (see :func:`process_tree_pids`). ``gpus=False``: RAM, CPU and
    battery only, and ``gpuError`` says the GPUs are not read yet.
    """
    reading = hw.gpus() if gpus else GpuReading(gpus=(), error=GPUS_NOT_READ_YET)
    return Health(
        at=datetime.now(timezone.utc),
        ram=hw.ram(),
        cpu=hw.cpu(),
        battery=hw.battery(),
        gpus=tuple(_mark_ours(gpu, our_pids) for gpu in reading.gpus),
        gpu_error=reading.error,
    )


def mark_ours(health: Health, our_pids: AbstractSet[int]) -> Health:
    """``health`` with each GPU process's ``ours`` judged against ``our_pids`` as they are now.

    A sample may predate the runs its server knows: a new server samples once
    before it has adopted the run already on the GPU, and that sample would
    call the run's own trainer foreign (seen on a real H200).
    """
    return attrs.evolve(health, gpus=tuple(_mark_ours(gpu, our_pids) for gpu in health.gpus))


def _mark_ours(gpu: Gpu, our_pids: AbstractSet[int]) -> Gpu:
    processes = tuple(attrs.evolve(process, ours=process.pid in our_pids) for process in gpu.processes)
    return attrs.evolve(gpu, processes=processes)


def process_tree_pids(root_pids: Iterable[int]) -> set[int]:
    """The root pids and every live descendant of each.

    The roots are always included (a trainer that just exited may still be
    listed by the GPU driver); descendants that vanish, or that the operating
    system will not show, are skipped without error.
    """
    pids: set[int] = set()
    for root in root_pids:
        pids.add(root)
        pids.update(tree_pids(root))
    return pids


def format_capability(capability: tuple[int, int] | None) -> str | None:
    """``(8, 6)`` -> ``"8.6"``."""
    return None if capability is None else f"{capability[0]}.{capability[1]}"


def health_to_wire(health: Health) -> dict[str, Any]:
    """The contract's ``Health`` object: every key present, null included."""
    return {
        "at": iso_utc_moment(health.at),
        "ram": {
            "totalMb": health.ram.total_mb,
            "availableMb": health.ram.available_mb,
            "percent": health.ram.percent,
        },
        "cpu": {"percent": health.cpu.percent, "count": health.cpu.count},
        "battery": _battery_to_wire(health.battery),
        "gpus": [_gpu_to_wire(gpu) for gpu in health.gpus],
        "gpuError": health.gpu_error,
    }


def _battery_to_wire(battery: BatteryInfo | None) -> dict[str, Any] | None:
    if battery is None:
        return None
    return {"percent": battery.percent, "pluggedIn": battery.plugged_in}


def _gpu_to_wire(gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "name": gpu.name,
        "utilization": gpu.utilization,
        "memoryUsedMb": gpu.memory_used_mb,
        "memoryTotalMb": gpu.memory_total_mb,
        "temperature": gpu.temperature,
        "computeCapability": format_capability(gpu.compute_capability),
        "processes": [
            {"pid": process.pid, "usedMemoryMb": process.used_memory_mb, "ours": process.ours}
            for process in gpu.processes
        ],
    }
