"""The pump's wait after a read (``ReadPacing``): a trickle is batched, a flood is never throttled.

Pure: a fake clock; what the pump does with the wait is covered end to end by the capture tests.
"""

from __future__ import annotations

import pytest

from arena_ls.agent.read_pacing import (
    PIPE_SHARE,
    RATE_HALF_LIFE,
    SMALL_READ,
    WAIT_SECONDS,
    ReadPacing,
)

PIPE = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def paced(pipe_bytes: int = PIPE) -> tuple[ReadPacing, Clock]:
    clock = Clock()
    return ReadPacing(pipe_bytes, clock), clock


def test_a_trickle_waits_the_full_time_so_that_its_lines_gather() -> None:
    pacing, clock = paced()
    for _ in range(50):  # 100 lines a second, one line a read
        clock.now += 0.01
        assert pacing.wait_after(74) == WAIT_SECONDS


def test_a_large_read_is_a_floods_and_the_next_read_follows_at_once() -> None:
    pacing, clock = paced()
    clock.now += 0.001
    assert pacing.wait_after(SMALL_READ) == 0.0
    clock.now += 0.001
    assert pacing.wait_after(PIPE) == 0.0


@pytest.mark.parametrize("rate", [3e8, 8e8, 4e9])
def test_after_a_flood_a_small_read_waits_no_longer_than_half_the_pipe_takes_to_fill(rate: float) -> None:
    """The bug this replaced: a fixed 2 ms wait let a 0.8 GB/s trainer fill the 1 MiB pipe and block."""
    pacing, clock = paced()
    gap = PIPE / rate
    for _ in range(5):
        clock.now += gap
        assert pacing.wait_after(PIPE) == 0.0
    clock.now += 0.0001  # the trainer paused: the pump caught up
    wait = pacing.wait_after(4096)
    assert wait * rate <= PIPE_SHARE * PIPE * 1.01  # the peak decayed a little in the pause
    assert wait < WAIT_SECONDS


def test_the_memory_of_a_flood_fades_and_a_trickle_waits_fully_again() -> None:
    pacing, clock = paced()
    clock.now += 0.001
    pacing.wait_after(PIPE)  # ~1 GB/s
    clock.now += 0.0001
    assert pacing.wait_after(100) < WAIT_SECONDS
    clock.now += 20 * RATE_HALF_LIFE  # a second of silence
    assert pacing.wait_after(100) == WAIT_SECONDS


def test_the_peak_decays_by_half_each_half_life() -> None:
    pacing, clock = paced()
    clock.now += 0.001
    pacing.wait_after(PIPE)
    peak = pacing.peak_rate
    clock.now += RATE_HALF_LIFE
    pacing.wait_after(1)
    assert pacing.peak_rate == pytest.approx(peak / 2, rel=1e-6)


def test_a_small_pipe_bounds_the_wait_by_its_own_size() -> None:
    small = 1 << 16
    pacing, clock = paced(small)
    clock.now += 0.001
    pacing.wait_after(small - 1)  # 64 MB/s, below SMALL_READ
    clock.now += 0.0005
    wait = pacing.wait_after(1000)
    assert 0.0 < wait <= PIPE_SHARE * small / pacing.peak_rate + 1e-12


def test_an_unknown_pipe_size_never_waits() -> None:
    """Windows (its pipe's real capacity cannot be asked): reads follow one another."""
    pacing, clock = paced(0)
    for _ in range(5):
        clock.now += 0.01
        assert pacing.wait_after(74) == 0.0


def test_a_wait_too_short_to_gather_anything_is_no_wait() -> None:
    pacing, clock = paced()
    clock.now += 1e-6
    pacing.wait_after(SMALL_READ - 1)  # ~65 GB/s: half the pipe in 8 µs
    clock.now += 1e-6
    assert pacing.wait_after(10) == 0.0
