"""The GPU's slowdown temperature (the thermal insight's limit), read through a scripted NVML."""

from __future__ import annotations

from typing import Any

import pynvml

from arena_ls.health import SystemHardware
from arena_ls.health.snapshot import take_health
from tests.health.test_nvml_reading import ScriptedNvml, a_gpu, nvml_error
from tests.helpers.fake_hardware import FakeHardware


class ThresholdNvml(ScriptedNvml):
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1

    def nvmlDeviceGetTemperatureThreshold(self, handle: int, threshold: int) -> Any:
        assert threshold == self.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._gpu(handle, "slowdown")


def test_the_slowdown_threshold_is_read() -> None:
    reading = SystemHardware(nvml=ThresholdNvml([a_gpu(slowdown=87)])).gpus()
    assert reading.error is None and reading.gpus[0].slowdown_temperature == 87


def test_a_gpu_without_the_threshold_reads_none() -> None:
    unsupported = a_gpu(slowdown=nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED))
    reading = SystemHardware(nvml=ThresholdNvml([unsupported])).gpus()
    assert reading.error is None and reading.gpus[0].slowdown_temperature is None
    assert SystemHardware(nvml=ScriptedNvml([a_gpu()])).gpus().gpus[0].slowdown_temperature is None


def test_the_fake_hardware_carries_the_threshold() -> None:
    fake = FakeHardware.from_dict({"gpus": [{"temperature": 90, "slowdownTemperature": 85}]})
    gpu = take_health(fake, set()).gpus[0]
    assert (gpu.temperature, gpu.slowdown_temperature) == (90, 85)
