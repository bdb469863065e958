"""A fake machine for tests: GPUs, a battery and RAM numbers that this machine lacks.

A test helper only, never a product mode. Two ways to use it:

- in-process: ``FakeHardware(battery_info=BatteryInfo(57, False), gpu_list=[fake_gpu(...)])``,
  then change its fields between calls;
- across processes: write JSON with :func:`write_fake_hardware`, set
  ``ARENA_FAKE_HARDWARE`` to its path and launch the server with
  ``hardware=FakeHardware.from_env()``. The file is re-read on every call, so a
  test can change the machine while the server runs (write it again).

The JSON has the contract's ``Health`` shape, every key optional::

    {"ram": {"totalMb": 32768, "availableMb": 24576},
     "cpu": {"percent": 12.5, "count": 8},
     "battery": {"percent": 57, "pluggedIn": false},
     "gpus": [{"index": 0, "name": "NVIDIA GeForce GTX 1080", "utilization": 3,
               "memoryUsedMb": 3200, "memoryTotalMb": 8192, "temperature": 41,
               "computeCapability": "6.1", "slowdownTemperature": 87,
               "processes": [{"pid": 4242, "usedMemoryMb": 3120}]}],
     "gpuError": null,
     "diskFreeMb": 500000,
     "boot": {"id": "a-boot-id", "time": 1764990000.0}}

Without ``boot`` the fake reports the real machine's boot: a run started by a fake server
and adopted by a real one is on the same boot.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import attrs

from arena_ls import platform
from arena_ls.health.model import (
    BatteryInfo,
    BootIdentity,
    CpuInfo,
    Gpu,
    GpuProcess,
    GpuReading,
    RamInfo,
)

ENV_VAR = "ARENA_FAKE_HARDWARE"


def fake_gpu(
    index: int = 0,
    *,
    name: str = "NVIDIA GeForce RTX 3090",
    capability: tuple[int, int] | None = (8, 6),
    processes: Iterable[tuple[int, int | None]] = (),
    memory_total_mb: int = 24576,
    utilization: int | None = 0,
    temperature: int | None = 40,
) -> Gpu:
    """A GPU whose compute processes are ``(pid, used MB)`` pairs."""
    listed = tuple(GpuProcess(pid=pid, used_memory_mb=mb) for pid, mb in processes)
    used = sum(process.used_memory_mb or 0 for process in listed)
    return Gpu(
        index=index,
        name=name,
        utilization=utilization,
        memory_used_mb=used,
        memory_total_mb=memory_total_mb,
        temperature=temperature,
        compute_capability=capability,
        processes=listed,
    )


@attrs.define
class FakeHardware:
    """Implements ``arena_ls.health.Hardware`` from settable fields."""

    ram_total_mb: int = 32768
    ram_available_mb: int = 24576
    cpu_percent: float = 12.5
    cpu_count: int = 8
    battery_info: BatteryInfo | None = None
    gpu_list: list[Gpu] = attrs.field(factory=list)
    gpu_error: str | None = None
    disk_free: int = 500_000
    boot: BootIdentity | None = None
    """None: the real machine's boot."""
    source: Path | None = None
    """When set, every call first re-reads the machine from this JSON file."""
    calls: int = 0
    """How many readings were made (any method)."""
    agent_factory: ClassVar[tuple[str, str]] = (
        "tests.helpers.fake_hardware:FakeHardware.from_env",
        str(Path(__file__).resolve().parents[2]),
    )
    """What a server given this fake hands its job agents (``arena_ls.health.agent_hardware``):
    they follow the same ``ARENA_FAKE_HARDWARE`` file, so a test can unplug a real run's battery."""
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False, eq=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FakeHardware:
        fake = cls()
        fake.apply(data)
        return fake

    @classmethod
    def from_file(cls, path: Path | str) -> FakeHardware:
        """A fake that follows the JSON file at ``path`` (read now and on every call)."""
        fake = cls(source=Path(path))
        fake.apply(json.loads(Path(path).read_text(encoding="utf-8")))
        return fake

    @classmethod
    def from_env(cls) -> FakeHardware:
        """:meth:`from_file` on the path in ``ARENA_FAKE_HARDWARE``."""
        path = os.environ.get(ENV_VAR)
        if not path:
            raise RuntimeError(f"{ENV_VAR} must name the fake hardware JSON file")
        return cls.from_file(path)

    def apply(self, data: Mapping[str, Any]) -> None:
        """Replace the whole machine with ``data`` (missing keys take the defaults)."""
        default = FakeHardware()
        ram = data.get("ram") or {}
        cpu = data.get("cpu") or {}
        self.ram_total_mb = int(ram.get("totalMb", default.ram_total_mb))
        self.ram_available_mb = int(ram.get("availableMb", default.ram_available_mb))
        self.cpu_percent = float(cpu.get("percent", default.cpu_percent))
        self.cpu_count = int(cpu.get("count", default.cpu_count))
        self.battery_info = _battery_from_dict(data.get("battery"))
        self.gpu_list = [_gpu_from_dict(entry, index) for index, entry in enumerate(data.get("gpus") or [])]
        self.gpu_error = data.get("gpuError")
        self.disk_free = int(data.get("diskFreeMb", default.disk_free))
        boot = data.get("boot")
        self.boot = None if boot is None else BootIdentity(boot.get("id"), boot.get("time"))

    def ram(self) -> RamInfo:
        self._observe()
        used = self.ram_total_mb - self.ram_available_mb
        percent = 100.0 * used / self.ram_total_mb if self.ram_total_mb else 0.0
        return RamInfo(self.ram_total_mb, self.ram_available_mb, round(percent, 1))

    def cpu(self) -> CpuInfo:
        self._observe()
        return CpuInfo(self.cpu_percent, self.cpu_count)

    def battery(self) -> BatteryInfo | None:
        self._observe()
        return self.battery_info

    def gpus(self) -> GpuReading:
        self._observe()
        return GpuReading(gpus=tuple(self.gpu_list), error=self.gpu_error)

    def disk_free_mb(self, path: Path) -> int:
        self._observe()
        return self.disk_free

    def boot_identity(self) -> BootIdentity:
        self._observe()
        if self.boot is not None:
            return self.boot
        return BootIdentity(platform.boot_id(), platform.boot_time())

    def _observe(self) -> None:
        with self._lock:
            self.calls += 1
            if self.source is None:
                return
            try:
                data = json.loads(self.source.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return  # keep the last machine; write_fake_hardware replaces atomically
            self.apply(data)


def write_fake_hardware(path: Path, data: Mapping[str, Any]) -> None:
    """Write the fake machine's JSON atomically, so a reader never sees half of it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data), encoding="utf-8")
    os.replace(partial, path)


def _battery_from_dict(data: Mapping[str, Any] | None) -> BatteryInfo | None:
    if data is None:
        return None
    plugged = data.get("pluggedIn")
    return BatteryInfo(
        percent=float(data.get("percent", 100)),
        plugged_in=None if plugged is None else bool(plugged),
    )


def _gpu_from_dict(data: Mapping[str, Any], position: int) -> Gpu:
    processes = tuple(_process_from(entry) for entry in data.get("processes") or [])
    used = data.get("memoryUsedMb")
    if used is None:
        used = sum(process.used_memory_mb or 0 for process in processes)
    return Gpu(
        index=int(data.get("index", position)),
        name=str(data.get("name", "NVIDIA GeForce RTX 3090")),
        utilization=data.get("utilization", 0),
        memory_used_mb=int(used),
        memory_total_mb=int(data.get("memoryTotalMb", 24576)),
        temperature=data.get("temperature", 40),
        compute_capability=_capability_from(data.get("computeCapability", "8.6")),
        processes=processes,
        slowdown_temperature=data.get("slowdownTemperature"),
    )


def _process_from(entry: Any) -> GpuProcess:
    if isinstance(entry, Mapping):
        return GpuProcess(pid=int(entry["pid"]), used_memory_mb=entry.get("usedMemoryMb"))
    pid, used = entry
    return GpuProcess(pid=int(pid), used_memory_mb=used)


def _capability_from(value: Any) -> tuple[int, int] | None:
    """``"6.1"`` or ``[6, 1]`` -> ``(6, 1)``; null stays None."""
    if value is None:
        return None
    if isinstance(value, str):
        major, minor = value.split(".", 1)
        return int(major), int(minor)
    major, minor = value
    return int(major), int(minor)
