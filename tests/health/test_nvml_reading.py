"""SystemHardware's NVML translation, with a scripted NVML passed in (no driver here).

The scripted module is handed to ``SystemHardware(nvml=...)``; nothing is put
into ``sys.modules``. It raises pynvml's real error classes, so the code under
test sees exactly what the real bindings raise.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from arena_ls.health import SystemHardware
from arena_ls.health.model import GpuProcess

MB = 1024 * 1024


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


class ScriptedNvml:
    """The part of pynvml that SystemHardware calls, driven by per-GPU dictionaries."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_LibraryNotFound = pynvml.NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = pynvml.NVMLError_DriverNotLoaded
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, gpus: list[dict[str, Any]], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.init_calls = 0
        self.shutdown_calls = 0
        self._lock = threading.Lock()

    def _gpu(self, handle: int, key: str) -> Any:
        value = self.gpus[handle][key]
        if isinstance(value, BaseException):
            raise value
        return value

    def nvmlInit(self) -> None:
        with self._lock:
            self.init_calls += 1
        if self.init_error is not None:
            raise nvml_error(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self._gpu(handle, "name")

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return self._gpu(handle, "memory")

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return self._gpu(handle, "utilization")

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> Any:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "temperature")

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> Any:
        return self._gpu(handle, "capability")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> Any:
        return self._gpu(handle, "processes")


def a_gpu(**overrides: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "name": "NVIDIA GeForce GTX 1080",
        "memory": SimpleNamespace(used=3200 * MB, total=8192 * MB, free=4992 * MB),
        "utilization": SimpleNamespace(gpu=37, memory=12),
        "temperature": 61,
        "capability": (6, 1),
        "processes": [
            SimpleNamespace(pid=4242, usedGpuMemory=3120 * MB),
            SimpleNamespace(pid=4343, usedGpuMemory=None),
        ],
    }
    gpu.update(overrides)
    return gpu


def test_a_gpu_is_translated() -> None:
    reading = SystemHardware(nvml=ScriptedNvml([a_gpu()])).gpus()

    assert reading.error is None
    (gpu,) = reading.gpus
    assert gpu.index == 0
    assert gpu.name == "NVIDIA GeForce GTX 1080"
    assert (gpu.memory_used_mb, gpu.memory_total_mb) == (3200, 8192)
    assert gpu.utilization == 37
    assert gpu.temperature == 61
    assert gpu.compute_capability == (6, 1)
    assert gpu.processes == (GpuProcess(4242, 3120), GpuProcess(4343, None))


def test_bytes_names_from_old_bindings_are_decoded() -> None:
    reading = SystemHardware(nvml=ScriptedNvml([a_gpu(name=b"Tesla P100")])).gpus()

    assert reading.gpus[0].name == "Tesla P100"


def test_readings_a_gpu_lacks_are_none() -> None:
    unsupported = a_gpu(
        utilization=nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED),
        temperature=nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED),
        capability=nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND),
    )

    reading = SystemHardware(nvml=ScriptedNvml([unsupported])).gpus()

    assert reading.error is None
    (gpu,) = reading.gpus
    assert (gpu.utilization, gpu.temperature, gpu.compute_capability) == (None, None, None)


def test_a_gpu_lost_midway_degrades_to_an_error() -> None:
    lost = a_gpu(memory=nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST))

    reading = SystemHardware(nvml=ScriptedNvml([a_gpu(), lost])).gpus()

    assert [gpu.index for gpu in reading.gpus] == [0]
    assert reading.error == "GPU 1 could not be read (NVML: GPU is lost)"


def test_a_gpu_lost_while_listing_processes_degrades_to_an_error() -> None:
    lost = a_gpu(processes=nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST))

    reading = SystemHardware(nvml=ScriptedNvml([lost])).gpus()

    assert reading.gpus == ()
    assert reading.error is not None
    assert "GPU is lost" in reading.error


def test_processes_not_supported_leaves_a_note() -> None:
    gpu = a_gpu(processes=nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED))

    reading = SystemHardware(nvml=ScriptedNvml([gpu])).gpus()

    assert reading.gpus[0].processes == ()
    assert reading.error == "GPU 0: compute processes not readable (NVML: Not Supported)"


class OldDriverNvml(ScriptedNvml):
    """The unversioned call needs an entry point this driver lacks; v3 is absent; v2 works."""

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> Any:
        raise pynvml.NVMLLibraryMismatchError("Unversioned function called")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: int) -> Any:
        return [SimpleNamespace(pid=99, usedGpuMemory=64 * MB)]


def test_an_older_driver_falls_back_to_the_v2_process_list() -> None:
    reading = SystemHardware(nvml=OldDriverNvml([a_gpu()])).gpus()

    assert reading.error is None
    assert reading.gpus[0].processes == (GpuProcess(99, 64),)


class NoProcessListNvml(ScriptedNvml):
    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> Any:
        raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def test_no_process_list_at_all_leaves_a_note() -> None:
    reading = SystemHardware(nvml=NoProcessListNvml([a_gpu()])).gpus()

    assert reading.gpus[0].processes == ()
    assert reading.error == "GPU 0: this NVML cannot list compute processes"


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVIDIA driver not found (NVML: "),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded (NVML: "),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission to read the GPUs (NVML: "),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML could not start (NVML: "),
    ],
)
def test_init_failure_is_a_reason_not_an_exception(code: int, expected: str) -> None:
    nvml = ScriptedNvml([a_gpu()], init_error=code)
    hw = SystemHardware(nvml=nvml)

    first = hw.gpus()
    second = hw.gpus()

    assert first.gpus == ()
    assert first.error is not None
    assert first.error.startswith(expected)
    assert second == first
    assert nvml.init_calls == 1


def test_nvml_is_initialised_once_across_threads_and_shut_down_once() -> None:
    nvml = ScriptedNvml([a_gpu()])
    hw = SystemHardware(nvml=nvml)
    readings: list[Any] = []
    threads = [threading.Thread(target=lambda: readings.append(hw.gpus())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    hw.close()
    hw.close()

    assert len(readings) == 8
    assert all(reading.error is None for reading in readings)
    assert nvml.init_calls == 1
    assert nvml.shutdown_calls == 1
    assert hw.gpus().error == "GPU probe closed"


class BrokenNvml(ScriptedNvml):
    def nvmlDeviceGetCount(self) -> int:
        raise AttributeError("a bug in the bindings")


def test_an_unexpected_failure_is_still_not_an_exception() -> None:
    reading = SystemHardware(nvml=BrokenNvml([a_gpu()])).gpus()

    assert reading.gpus == ()
    assert reading.error is not None
    assert "a bug in the bindings" in reading.error


class UncountableNvml(ScriptedNvml):
    def nvmlDeviceGetCount(self) -> int:
        raise nvml_error(pynvml.NVML_ERROR_UNKNOWN)


def test_count_failure_is_an_error() -> None:
    reading = SystemHardware(nvml=UncountableNvml([])).gpus()

    assert reading.gpus == ()
    assert reading.error == "GPUs could not be counted (NVML: Unknown Error)"
