"""Health samples taken in the background, so that a status request never waits on NVML."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from arena_ls.health.hardware import Hardware
from arena_ls.health.model import Health
from arena_ls.health.snapshot import take_health

log = logging.getLogger(__name__)

ACTIVE_INTERVAL_S = 5.0
"""Seconds between samples while a run is active."""
IDLE_INTERVAL_S = 30.0
"""Seconds between samples while nothing runs."""


def _no_pids() -> Iterable[int]:
    return ()


class HealthSampler:
    """Samples the machine on a daemon thread; :meth:`latest` never blocks.

    The first sample is taken synchronously in the constructor, so there is
    always one to return; where the GPUs' reader has not started yet (the
    hardware's ``gpus_ready`` says so: starting NVML costs 10-20 ms of CPU, and a
    new server's first status waited for it), that sample leaves the GPUs out
    (``gpuError`` says why) and the thread reads them after
    ``first_gpu_read_after_s`` (0: at once), or as soon as :meth:`read_gpus_now`
    is called: a server calls it once its first status is answered, which
    otherwise shared the GIL with NVML's start (issue 38 item 7). ``our_pids``
    is called before every sample for the pids to mark ``ours`` (every process
    of this workspace's runs).
    :meth:`set_active` switches between the two cadences; switching wakes the
    thread, which samples at once and then waits the new interval.
    """

    def __init__(
        self,
        hw: Hardware,
        our_pids: Callable[[], Iterable[int]] = _no_pids,
        *,
        active_interval_s: float = ACTIVE_INTERVAL_S,
        idle_interval_s: float = IDLE_INTERVAL_S,
        first_gpu_read_after_s: float = 0.0,
    ) -> None:
        self._hw = hw
        self._our_pids = our_pids
        self._active_interval_s = active_interval_s
        self._idle_interval_s = idle_interval_s
        self._first_gpu_read_after_s = first_gpu_read_after_s
        self._active = False
        self._sample_lock = threading.Lock()
        """Serialises sampling so that an older sample never replaces a newer one."""
        self._latest_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._full = threading.Event()
        """Set once a sample with the GPUs read is in (the device profile is known)."""
        gpus_ready: Callable[[], bool] | None = getattr(hw, "gpus_ready", None)
        if gpus_ready is None or gpus_ready():
            self._latest = self._take()
            self._full.set()
        else:
            self._latest = take_health(hw, set(self._our_pids()), gpus=False)
        self._thread = threading.Thread(target=self._run, name="arena-health-sampler", daemon=True)
        self._thread.start()

    @property
    def interval_s(self) -> float:
        """The current wait between two background samples."""
        return self._active_interval_s if self._active else self._idle_interval_s

    @property
    def running(self) -> bool:
        """True until :meth:`close` has stopped the thread."""
        return self._thread.is_alive()

    def wait_full_sample(self, timeout_s: float | None) -> bool:
        """Whether a sample with the GPUs read is in (or the sampler closed before it read them),
        waiting up to ``timeout_s`` for it; a wait does not hasten the first reading:
        :meth:`read_gpus_now` does."""
        return self._full.wait(timeout_s)

    def read_gpus_now(self) -> None:
        """End the wait before the first reading of the GPUs (nothing if they were read)."""
        if not self._full.is_set():
            self._wake.set()

    def latest(self) -> Health:
        """The most recent sample; returns at once."""
        with self._latest_lock:
            return self._latest

    def refresh(self) -> Health:
        """Sample now (blocking: call it from a worker thread) and return the sample.

        If reading the machine fails, the failure is logged and the previous
        sample is returned.
        """
        try:
            return self._sample()
        except Exception:
            log.exception("health sample failed")
            return self.latest()

    def set_active(self, active: bool) -> None:
        """5 s cadence while a run is active, 30 s otherwise (by default)."""
        if active != self._active:
            self._active = active
            self._wake.set()

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the thread; returns once it has ended (or after ``timeout_s``)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def __enter__(self) -> HealthSampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _take(self) -> Health:
        return take_health(self._hw, set(self._our_pids()))

    def _sample(self) -> Health:
        with self._sample_lock:
            health = self._take()
            with self._latest_lock:
                self._latest = health
            return health

    def _run(self) -> None:
        if not self._full.is_set():
            self._wake.wait(self._first_gpu_read_after_s)
            self._wake.clear()
            if self._stopping.is_set():
                self._full.set()  # nobody waits for a reading that will never come
                return
            try:
                self.refresh()
            finally:
                self._full.set()
        while not self._stopping.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            self.refresh()
