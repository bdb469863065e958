"""The machine behind one small injected interface.

Everything else in ``arena_ls.health`` reads the machine through
:class:`Hardware`, so tests can fake the parts that are not on the test
machine (NVIDIA GPUs, a battery) while the rest of the server stays real.
:class:`SystemHardware` is the real thing: psutil for RAM, CPU, battery and
disk, NVML (the ``nvidia-ml-py`` package, imported as ``pynvml``) for GPUs.

Reading GPUs never raises: a machine without an NVIDIA driver, a driver too
old for a call, or a GPU that falls off the bus between two calls all end up
as :attr:`GpuReading.error`, with whatever could be read still listed.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import psutil

from arena_ls import platform
from arena_ls.health.model import (
    BYTES_PER_MB,
    BatteryInfo,
    BootIdentity,
    CpuInfo,
    Gpu,
    GpuProcess,
    GpuReading,
    RamInfo,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class Hardware(Protocol):
    """Reads the machine. Implementations must be safe to call from any thread."""

    def ram(self) -> RamInfo: ...

    def cpu(self) -> CpuInfo: ...

    def battery(self) -> BatteryInfo | None:
        """None when the machine has no battery (desktops, servers)."""
        ...

    def gpus(self) -> GpuReading:
        """Every GPU with its compute processes; never raises."""
        ...

    def disk_free_mb(self, path: Path) -> int:
        """Free space on the file system that holds ``path`` (which may not exist yet)."""
        ...

    def boot_identity(self) -> BootIdentity:
        """Which boot of the machine this is (its id where the system has one, and its time)."""
        ...


class SystemHardware:
    """The real machine: psutil and NVML.

    ``nvml`` replaces the ``pynvml`` module (for tests of the NVML translation);
    by default it is imported on the first :meth:`gpus` call.
    """

    def __init__(self, nvml: Any = None) -> None:
        self._nvml = NvmlSession(nvml)

    def ram(self) -> RamInfo:
        memory = psutil.virtual_memory()
        return RamInfo(
            total_mb=int(memory.total) // BYTES_PER_MB,
            available_mb=int(memory.available) // BYTES_PER_MB,
            percent=float(memory.percent),
        )

    def cpu(self) -> CpuInfo:
        # interval=None never blocks: it measures since the previous call
        # (the very first call of the process reads 0.0).
        percent = float(psutil.cpu_percent(interval=None))
        count = psutil.cpu_count(logical=True) or os.cpu_count() or 1
        return CpuInfo(percent=percent, count=int(count))

    def battery(self) -> BatteryInfo | None:
        return read_battery()

    def gpus(self) -> GpuReading:
        nvml, error = self._nvml.start()
        if nvml is None:
            return GpuReading(gpus=(), error=error)
        try:
            return read_gpus(nvml)
        except Exception as unexpected:  # a bug here must not take the server down
            log.exception("reading the GPUs failed")
            return GpuReading(gpus=(), error=f"GPU reading failed ({unexpected!r})")

    def disk_free_mb(self, path: Path) -> int:
        return int(shutil.disk_usage(nearest_existing(path)).free) // BYTES_PER_MB

    def boot_identity(self) -> BootIdentity:
        return BootIdentity(platform.boot_id(), platform.boot_time())

    def gpus_ready(self) -> bool:
        """Whether NVML was started already (reading the GPUs first imports and starts it: 20 ms
        of CPU, and much more where a driver answers slowly)."""
        return self._nvml.started

    def close(self) -> None:
        """Shut NVML down now instead of at exit. Later GPU reads report an error."""
        self._nvml.shutdown()


def nearest_existing(path: Path) -> Path:
    """``path`` itself if it exists, else its closest existing parent."""
    absolute = Path(os.path.abspath(path))
    for candidate in (absolute, *absolute.parents):
        if candidate.exists():
            return candidate
    return Path(absolute.anchor)


def read_battery() -> BatteryInfo | None:
    """The battery via psutil; None without one or where psutil cannot read it."""
    sensors_battery: Callable[[], Any] | None = getattr(psutil, "sensors_battery", None)
    if sensors_battery is None:  # platforms psutil has no battery support for
        return None
    try:
        battery = sensors_battery()
    except (AttributeError, NotImplementedError, OSError, psutil.Error) as error:
        log.debug("battery not readable: %s", error)
        return None
    if battery is None:
        return None
    plugged = battery.power_plugged
    return BatteryInfo(
        percent=float(battery.percent),
        plugged_in=None if plugged is None else bool(plugged),
    )


class NvmlSession:
    """NVML initialised once, lazily and thread-safely; shut down at exit.

    A failed initialisation is remembered: a machine without a driver does not
    get one while the server runs, and retrying would cost a library load on
    every sample.
    """

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self._lock = threading.Lock()
        self._state = "new"  # new -> ready | failed; ready -> closed
        self._error: str | None = None

    @property
    def started(self) -> bool:
        """Whether ``start`` ran once (ready, failed or closed since)."""
        return self._state != "new"

    def start(self) -> tuple[Any, str | None]:
        """Return the initialised module and None, or None and why NVML is unusable."""
        with self._lock:
            if self._state == "new":
                self._initialise()
            if self._state == "ready":
                return self._module, None
            if self._state == "closed":
                return None, "GPU probe closed"
            return None, self._error

    def _initialise(self) -> None:
        module, error = _load_nvml(self._module)
        if error is not None:
            self._state, self._error = "failed", error
            log.info("GPUs not readable: %s", error)
            return
        self._module, self._state = module, "ready"
        atexit.register(self.shutdown)

    def shutdown(self) -> None:
        with self._lock:
            if self._state != "ready":
                return
            self._state = "closed"
            atexit.unregister(self.shutdown)
            try:
                self._module.nvmlShutdown()
            except _nvml_errors(self._module) as error:
                log.debug("nvmlShutdown failed: %s", error)


def _load_nvml(module: Any) -> tuple[Any, str | None]:
    if module is None:
        try:
            import pynvml

            module = pynvml
        except ImportError as error:
            return None, f"nvidia-ml-py is not installed ({error})"
    try:
        module.nvmlInit()
    except _nvml_errors(module) as error:
        return None, _describe_init_error(module, error)
    except OSError as error:
        return None, f"NVIDIA driver not found ({error})"
    return module, None


def _describe_init_error(nvml: Any, error: BaseException) -> str:
    if _is_error(nvml, error, "NVMLError_LibraryNotFound"):
        return f"NVIDIA driver not found (NVML: {error})"
    if _is_error(nvml, error, "NVMLError_DriverNotLoaded"):
        return f"NVIDIA driver not loaded (NVML: {error})"
    if _is_error(nvml, error, "NVMLError_NoPermission"):
        return f"no permission to read the GPUs (NVML: {error})"
    return f"NVML could not start (NVML: {error})"


def _nvml_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    """NVML's errors, including the version mismatch that is not an NVMLError."""
    errors: list[type[BaseException]] = []
    for name in ("NVMLError", "NVMLLibraryMismatchError"):
        cls = getattr(nvml, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            errors.append(cls)
    return tuple(errors)


def _is_error(nvml: Any, error: BaseException, name: str) -> bool:
    cls = getattr(nvml, name, None)
    return isinstance(cls, type) and isinstance(error, cls)


_UNAVAILABLE = (
    "NVMLError_NotSupported",
    "NVMLError_FunctionNotFound",
    "NVMLError_NoPermission",
    "NVMLLibraryMismatchError",
)
"""Errors that mean "this GPU or driver does not offer that reading", not "GPU broken"."""


def _is_unavailable(nvml: Any, error: BaseException) -> bool:
    return any(_is_error(nvml, error, name) for name in _UNAVAILABLE)


def read_gpus(nvml: Any) -> GpuReading:
    """Read every GPU through an initialised NVML module; never raises an NVML error."""
    errors = _nvml_errors(nvml)
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except errors as error:
        return GpuReading(gpus=(), error=f"GPUs could not be counted (NVML: {error})")
    gpus: list[Gpu] = []
    notes: list[str] = []
    for index in range(count):
        try:
            gpu, note = _read_gpu(nvml, index)
        except errors as error:
            notes.append(f"GPU {index} could not be read (NVML: {error})")
            continue
        gpus.append(gpu)
        if note is not None:
            notes.append(note)
    return GpuReading(gpus=tuple(gpus), error="; ".join(notes) or None)


def _read_gpu(nvml: Any, index: int) -> tuple[Gpu, str | None]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = nvml.nvmlDeviceGetName(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    processes, note = _compute_processes(nvml, handle, index)
    gpu = Gpu(
        index=index,
        name=name.decode(errors="replace") if isinstance(name, bytes) else str(name),
        utilization=_optional(nvml, lambda: int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
        memory_used_mb=int(memory.used) // BYTES_PER_MB,
        memory_total_mb=int(memory.total) // BYTES_PER_MB,
        temperature=_optional(
            nvml, lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        ),
        compute_capability=_optional(nvml, lambda: _capability(handle, nvml)),
        processes=processes,
        slowdown_temperature=_optional(nvml, lambda: _slowdown_temperature(nvml, handle)),
    )
    return gpu, note


def _slowdown_temperature(nvml: Any, handle: Any) -> int | None:
    """The temperature at which the GPU starts cutting its clocks (the thermal insight's limit)."""
    threshold = getattr(nvml, "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", None)
    reader = getattr(nvml, "nvmlDeviceGetTemperatureThreshold", None)
    if threshold is None or reader is None:
        return None
    return int(reader(handle, threshold))


def _capability(handle: Any, nvml: Any) -> tuple[int, int]:
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    return int(major), int(minor)


def _optional(nvml: Any, read: Callable[[], T]) -> T | None:
    """A reading the GPU or driver may not offer: None then; other NVML errors propagate."""
    try:
        return read()
    except _nvml_errors(nvml) as error:
        if _is_unavailable(nvml, error):
            return None
        raise


_PROCESS_GETTERS = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)
"""Newest first: an older driver lacks the newer entry points."""


def _compute_processes(nvml: Any, handle: Any, index: int) -> tuple[tuple[GpuProcess, ...], str | None]:
    """The GPU's compute processes, and a note when they could not be listed."""
    for getter_name in _PROCESS_GETTERS:
        getter = getattr(nvml, getter_name, None)
        if getter is None:
            continue
        try:
            raw = getter(handle)
        except _nvml_errors(nvml) as error:
            if _is_error(nvml, error, "NVMLError_FunctionNotFound") or _is_error(
                nvml, error, "NVMLLibraryMismatchError"
            ):
                continue
            if _is_unavailable(nvml, error):
                return (), f"GPU {index}: compute processes not readable (NVML: {error})"
            raise
        return tuple(_gpu_process(entry) for entry in raw), None
    return (), f"GPU {index}: this NVML cannot list compute processes"


def _gpu_process(entry: Any) -> GpuProcess:
    used = getattr(entry, "usedGpuMemory", None)
    return GpuProcess(
        pid=int(entry.pid),
        used_memory_mb=None if used is None else int(used) // BYTES_PER_MB,
    )
