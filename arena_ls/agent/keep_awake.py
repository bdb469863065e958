"""The agent keeps the machine awake while its ``train`` run runs (contract 8.3, ``power.keepAwake``).

Taken when the agent starts the run and released when the run has its final
status (through every relaunch, backoff and battery pause between: a
machine asleep would not relaunch, nor resume when power returns). Each
platform's hold (``platform_awake``) is also let go by the operating system
when the agent dies. ``RunInfo.keepAwake`` says what happened: true (held),
false (``power.keepAwake`` off, or not a ``train`` run of this machine) or
null (the platform did not allow it: the reason is a line in the run's log).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from arena_ls.platform_awake import AwakeHold, hold_awake
from arena_ls.run.rundir import RunSpec, RunState

log = logging.getLogger("arena_ls.agent")

Hold = Callable[[str, str], AwakeHold]
"""Takes the hold (who, why), or raises ``AwakeUnavailable``."""


def wanted(spec: RunSpec) -> bool:
    """A ``train`` run of this machine (it has a power spec) with ``power.keepAwake`` on."""
    return spec.kind == "train" and spec.power is not None and spec.power.keep_awake


class KeepAwake:
    """One run's hold on the machine's wakefulness."""

    def __init__(self, spec: RunSpec, hold: Hold | None = None) -> None:
        self.spec = spec
        self._hold_with = hold
        self._hold: AwakeHold | None = None
        self._lock = threading.Lock()

    def take(self, state: RunState, lock: threading.RLock, say: Callable[[str], None]) -> None:
        """Take the hold if the run wants it; ``state.keep_awake`` records the outcome (write it)."""
        if not wanted(self.spec):
            with lock:
                state.keep_awake = False
            return
        try:
            hold = self._take()
        except Exception as error:  # AwakeUnavailable, or anything a platform call raised: the run goes on
            with lock:
                state.keep_awake = None
            say(f"the machine cannot be kept awake during this run: {error}")
            return
        with self._lock:
            self._hold = hold
        with lock:
            state.keep_awake = True
        say(f"keeping the machine awake while the run trains ({hold.how})")

    def _take(self) -> AwakeHold:
        who, why = "arena-ls", f"training {self.spec.job_name} (run {self.spec.run_id})"
        if self._hold_with is not None:
            return self._hold_with(who, why)
        return hold_awake(who, why, os.getpid())

    def release(self) -> None:
        """Let go (the run ended); twice is harmless."""
        with self._lock:
            hold, self._hold = self._hold, None
        if hold is None:
            return
        try:
            hold.release()
        except Exception as error:  # the process's end lets go in any case
            log.warning("releasing the keep-awake hold failed: %s", error)
