"""When a pump waits before reading the trainer's pipe again: batch a trickle, never throttle a flood.

A trainer that writes line by line (``PYTHONUNBUFFERED=1``) would be read one
line per read: a wake-up, a record and two writes per line. A short wait
after a small read lets what comes meanwhile gather into one read and one
record, for at most ``WAIT_SECONDS`` of added latency.

The wait must never let the pipe fill: a trainer that finds it full is
blocked in its ``write`` until the pump reads again, and the run goes at the
pump's pace. A fixed 2 ms wait did exactly that to a block-buffered flood
(0.8 GB/s fills a 1 MiB pipe in 1.3 ms): the trainer blocked ~130 times a
run and took 0.70 s instead of 0.58 s. So the wait is bounded by the time
the recent peak rate takes to fill ``PIPE_SHARE`` of the pipe. A read
returns all the pipe holds (up to ``READ_CHUNK``), so the bytes of a read
over the time since the one before are the rate at which output arrived.
The peak decays with ``RATE_HALF_LIFE``: a flood that ends lets the waits
grow back within a fraction of a second.

Pure (a clock is injected); unit-tested in ``tests/lifecycle/test_read_pacing.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

WAIT_SECONDS = 0.002
"""The longest wait after a small read: the latency a trickle's line may gain."""
SMALL_READ = 1 << 16
"""A read of this many bytes or more is a flood's: the next read follows at once."""
PIPE_SHARE = 0.5
"""The share of the pipe the recent peak rate may fill during a wait."""
RATE_HALF_LIFE = 0.05
"""Seconds after which the remembered peak rate counts half."""
SHORTEST_WAIT = 0.0001
"""Below this a wait gathers nothing worth a sleep (the sleep's own cost is ~60 µs)."""


class ReadPacing:
    """The wait after each read of one pipe of ``pipe_bytes`` (0: unknown, never wait)."""

    def __init__(self, pipe_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._pipe_bytes = pipe_bytes
        self._clock = clock
        self._last_read = clock()
        self._peak_rate = 0.0

    @property
    def peak_rate(self) -> float:
        """Bytes a second: the highest recent arrival rate, decayed since."""
        return self._peak_rate

    def wait_after(self, size: int) -> float:
        """Seconds to wait after a read of ``size`` bytes before the next read."""
        now = self._clock()
        gap = max(now - self._last_read, 1e-9)
        self._last_read = now
        decayed = self._peak_rate * 0.5 ** (gap / RATE_HALF_LIFE)
        self._peak_rate = max(size / gap, decayed)
        if self._pipe_bytes <= 0 or size >= SMALL_READ:
            return 0.0
        if self._peak_rate <= 0.0:
            return WAIT_SECONDS
        wait = min(WAIT_SECONDS, PIPE_SHARE * self._pipe_bytes / self._peak_rate)
        return wait if wait >= SHORTEST_WAIT else 0.0
