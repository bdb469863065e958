"""The background health sampler: prompt reads, cadence switches, a clean stop.

Every wait below is for an event, with a generous deadline; nothing depends
on how fast this machine is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from arena_ls.health import HealthSampler
from arena_ls.health.model import GpuReading
from arena_ls.health.snapshot import GPUS_NOT_READ_YET
from tests.helpers.waiting import wait_until

from .support import FakeHardware, fake_gpu

DEADLINE_S = 30.0
HOUR = 3600.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    wait_until(condition, what, DEADLINE_S, pause=0.005)


class GatedHardware(FakeHardware):
    """GPU readings block on ``gate`` once ``armed`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def gpus(self) -> GpuReading:
        if self.armed.is_set():
            self.entered.set()
            self.gate.wait(DEADLINE_S)
        return super().gpus()


class FailingHardware(FakeHardware):
    """Fails every reading while ``failing`` is true."""

    failing = False

    def gpus(self) -> GpuReading:
        reading = super().gpus()
        if self.failing:
            raise RuntimeError("probe broke")
        return reading


class NvmlLikeHardware(FakeHardware):
    """GPUs whose reader starts at the first reading, as NVML does (``gpus_ready`` until then
    False); counts the GPU readings."""

    gpu_readings = 0

    def gpus_ready(self) -> bool:
        return self.gpu_readings > 0

    def gpus(self) -> GpuReading:
        self.gpu_readings += 1
        return super().gpus()


@pytest.fixture
def samplers() -> Iterator[list[HealthSampler]]:
    made: list[HealthSampler] = []
    yield made
    for sampler in made:
        sampler.close()


def test_first_sample_is_ready_at_construction(samplers: list[HealthSampler]) -> None:
    hw = FakeHardware()
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=HOUR)
    samplers.append(sampler)

    assert hw.calls == 4  # gpus, ram, cpu and battery, read once
    assert sampler.latest().ram.total_mb == hw.ram_total_mb


def test_latest_does_not_wait_for_a_sample_in_flight(samplers: list[HealthSampler]) -> None:
    hw = GatedHardware()
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=HOUR)
    samplers.append(sampler)
    first = sampler.latest()
    hw.armed.set()
    refreshed: list[object] = []
    refresher = threading.Thread(target=lambda: refreshed.append(sampler.refresh()), daemon=True)
    refresher.start()
    assert hw.entered.wait(DEADLINE_S), "the refresh never reached the GPU probe"

    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(sampler.latest()), daemon=True)
    reader.start()
    reader.join(DEADLINE_S)

    assert got == [first]  # returned while the refresh is still blocked
    hw.gate.set()
    refresher.join(DEADLINE_S)
    assert refreshed and refreshed[0] is sampler.latest()
    assert sampler.latest() is not first


def test_background_samples_follow_the_active_cadence(samplers: list[HealthSampler]) -> None:
    hw = FakeHardware()
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=0.01)
    samplers.append(sampler)
    first = sampler.latest()

    sampler.set_active(True)

    assert sampler.interval_s == 0.01
    wait_for(lambda: hw.calls >= 4 * 4 and sampler.latest() is not first, "3 more samples")


def test_becoming_active_wakes_an_idle_sampler(samplers: list[HealthSampler]) -> None:
    hw = FakeHardware(gpu_list=[fake_gpu(0, processes=[(4242, 100)])])
    pids: set[int] = set()
    sampler = HealthSampler(hw, lambda: pids, idle_interval_s=HOUR, active_interval_s=HOUR)
    samplers.append(sampler)
    assert sampler.latest().gpus[0].processes[0].ours is False

    pids.add(4242)  # a run started: its pid is ours from now on
    sampler.set_active(True)

    wait_for(lambda: sampler.latest().gpus[0].processes[0].ours, "a sample after waking")


def test_refresh_samples_now_with_current_pids(samplers: list[HealthSampler]) -> None:
    hw = FakeHardware(gpu_list=[fake_gpu(0, processes=[(4242, 100)])])
    pids: set[int] = set()
    sampler = HealthSampler(hw, lambda: pids, idle_interval_s=HOUR)
    samplers.append(sampler)

    pids.add(4242)
    health = sampler.refresh()

    assert health.gpus[0].processes[0].ours is True
    assert sampler.latest() is health


def test_a_failing_probe_keeps_the_last_sample_and_the_thread(
    samplers: list[HealthSampler],
) -> None:
    hw = FailingHardware()
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=0.01)
    samplers.append(sampler)
    first = sampler.latest()
    hw.failing = True

    assert sampler.refresh() is first
    sampler.set_active(True)
    calls = hw.calls
    wait_for(lambda: hw.calls > calls + 3, "more (failing) attempts")
    assert sampler.running
    hw.failing = False
    wait_for(lambda: sampler.latest() is not first, "a good sample again")


def test_close_ends_the_thread_promptly_from_a_long_wait() -> None:
    sampler = HealthSampler(FakeHardware(), idle_interval_s=HOUR, active_interval_s=HOUR)
    assert sampler.running

    sampler.close(timeout_s=DEADLINE_S)

    assert not sampler.running
    sampler.close()  # idempotent


def test_context_manager_closes() -> None:
    with HealthSampler(FakeHardware(), idle_interval_s=HOUR) as sampler:
        assert sampler.running
    assert not sampler.running


def test_with_a_reader_to_start_the_gpus_wait_until_asked(samplers: list[HealthSampler]) -> None:
    """A server's first status is answered before NVML starts (issue 38 item 7): the first sample
    leaves the GPUs out, and nothing reads them, however long something waits, until asked."""
    hw = NvmlLikeHardware(gpu_list=[fake_gpu(0)])
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=HOUR, first_gpu_read_after_s=HOUR)
    samplers.append(sampler)
    assert sampler.latest().gpus == () and sampler.latest().gpu_error == GPUS_NOT_READ_YET

    assert not sampler.wait_full_sample(0.05), "a wait alone does not read them"
    assert hw.gpu_readings == 0

    sampler.read_gpus_now()

    assert sampler.wait_full_sample(DEADLINE_S)
    assert hw.gpu_readings == 1
    assert [gpu.index for gpu in sampler.latest().gpus] == [0] and sampler.latest().gpu_error is None
    sampler.read_gpus_now()  # read already: nothing more
    assert sampler.wait_full_sample(0.0)


def test_unasked_the_gpus_are_read_after_the_delay(samplers: list[HealthSampler]) -> None:
    hw = NvmlLikeHardware(gpu_list=[fake_gpu(0)])
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=HOUR, first_gpu_read_after_s=0.01)
    samplers.append(sampler)

    assert sampler.wait_full_sample(DEADLINE_S)
    assert [gpu.index for gpu in sampler.latest().gpus] == [0]


def test_by_default_the_gpus_are_read_at_once(samplers: list[HealthSampler]) -> None:
    hw = NvmlLikeHardware(gpu_list=[fake_gpu(0)])
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=HOUR)
    samplers.append(sampler)

    assert sampler.wait_full_sample(DEADLINE_S)
    assert hw.gpu_readings == 1


def test_becoming_active_reads_the_gpus_at_once(samplers: list[HealthSampler]) -> None:
    """A run starting wakes the sampler: its GPUs are read then, not after the delay."""
    hw = NvmlLikeHardware(gpu_list=[fake_gpu(0)])
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=HOUR, first_gpu_read_after_s=HOUR)
    samplers.append(sampler)

    sampler.set_active(True)

    assert sampler.wait_full_sample(DEADLINE_S)


def test_closing_before_the_first_reading_frees_whoever_waits_for_it() -> None:
    hw = NvmlLikeHardware(gpu_list=[fake_gpu(0)])
    sampler = HealthSampler(hw, idle_interval_s=HOUR, active_interval_s=HOUR, first_gpu_read_after_s=HOUR)
    waited: list[bool] = []
    waiter = threading.Thread(target=lambda: waited.append(sampler.wait_full_sample(DEADLINE_S)))
    waiter.start()

    sampler.close(timeout_s=DEADLINE_S)
    waiter.join(DEADLINE_S)

    assert not sampler.running
    assert waited == [True]
    assert hw.gpu_readings == 0, "a closing sampler does not start the GPUs' reader"
