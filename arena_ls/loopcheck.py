"""A debug check that the event loop is never held: each callback's CPU time, against a limit.

Off unless ``ARENA_SLOW_CALLBACK_MS`` is set (the test helpers set it to 50
for every server they start). Then every callback the loop runs (a handler,
a timer, a task's step) is timed, and one that took longer than the limit
is logged as an error, with what it was, and appended to the file named by
``ARENA_SLOW_CALLBACK_LOG``, which the test helpers read when they stop the
server: a test whose server held its loop fails.

It is asyncio's ``slow_callback_duration`` check of debug mode, measured in
the loop thread's CPU time instead of wall time, so that a callback
preempted on a loaded machine, or one waiting for the GIL while a worker
thread parses a manifest, is not mistaken for one that holds the loop (the
CPU time its waits themselves cost is taken out: ``WAIT_COST``); and
without the rest of debug mode, which would slow every callback.
"""

from __future__ import annotations

import asyncio.events
import gc
import logging
import os
import threading
import time
from typing import Any, NamedTuple

from arena_ls.platform import thread_cpu_and_waits

log = logging.getLogger(__name__)

WAIT_COST = 100e-6
"""The CPU time one wait may cost the waiting thread (a wake of its GIL wait, a context switch),
taken out of a callback's CPU time. A thread that waits for the GIL while a worker thread is
in one long C call (``ast.parse`` of a 160,000-line buffer, seconds on a loaded machine) wakes
every switch interval (1 ms, ``protocol.main.SWITCH_INTERVAL``), and each wake is CPU time of
its own: 20-47 us a wait on the project's loaded VM (about 10 us of it in user space), 14,000
waits and 290-380 ms of CPU behind two such parses. Counted, that made a status that did a few
milliseconds of work look like one that held the loop for 100 ms. A callback's own work still
counts: working while a worker wants the GIL, it waits about once a millisecond, so at most a
tenth of its time is taken out."""

LIMIT_VARIABLE = "ARENA_SLOW_CALLBACK_MS"
REPORT_VARIABLE = "ARENA_SLOW_CALLBACK_LOG"

_installed = False
_armed = False


def arm() -> None:
    """Start counting (the server calls it once its session is initialised).

    Start-up is not counted: until then no run streams and no request but
    ``initialize`` waits, and its first uses (the imports of the workspace's
    modules, cattrs generating the structuring code of the client's
    capabilities) are one-time costs of the process. Counting starts with the
    callback after the caller's, which finishes start-up (the collection before
    ``gc.freeze`` in ``protocol.gc_freeze``)."""
    try:
        asyncio.get_running_loop().call_soon(_set_armed)
    except RuntimeError:  # no loop running here: from now on
        _set_armed()


def _set_armed() -> None:
    global _armed
    _armed = True


def install_from_environment() -> None:
    """Install the check when ``ARENA_SLOW_CALLBACK_MS`` asks for it (once per process)."""
    raw = os.environ.get(LIMIT_VARIABLE)
    if not raw:
        return
    try:
        limit_ms = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of milliseconds: no slow-callback check", LIMIT_VARIABLE, raw)
        return
    install(limit_ms / 1000.0, os.environ.get(REPORT_VARIABLE) or None)


def install(limit: float, report_path: str | None = None) -> None:
    """Time every callback of every event loop in this process against ``limit`` seconds of CPU."""
    global _installed
    if _installed:
        return
    _installed = True
    run = asyncio.events.Handle._run
    lock = threading.Lock()

    collections = _Collections()
    gc.callbacks.append(collections.hear)

    def timed_run(handle: asyncio.events.Handle) -> None:
        started, waits_before = thread_cpu_and_waits()
        wall = time.monotonic()
        collections.reset()
        try:
            run(handle)
        finally:
            cpu, waits_after = thread_cpu_and_waits()
            waits = waits_after - waits_before
            held = cpu - started - waits * WAIT_COST
            if held > limit and _armed:
                waited = Waited(cpu - started, waits, time.monotonic() - wall)
                _report(handle, held, waited, collections.summary(), report_path, lock)

    asyncio.events.Handle._run = timed_run  # type: ignore[method-assign,assignment]
    log.info("slow-callback check on: a callback over %.0f ms of CPU is an error", limit * 1000)


class _Collections:
    """The garbage collections of the loop's thread during one callback, and their CPU time.

    A full collection walks every object the process tracks (thousands of runs in
    the history make that tens of milliseconds), so a report names the share
    that was the collector's, not the callback's own work."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.cpu = 0.0
        self.generations: list[int] = []
        self._started: float | None = None

    def reset(self) -> None:
        self.cpu = 0.0
        self.generations.clear()

    def hear(self, phase: str, info: dict[str, int]) -> None:
        if threading.get_ident() != self.thread:
            return
        if phase == "start":
            self._started = time.thread_time()
        elif self._started is not None:
            self.cpu += time.thread_time() - self._started
            self.generations.append(info.get("generation", -1))
            self._started = None

    def summary(self) -> str:
        if not self.generations:
            return ""
        return (
            f", of which {self.cpu * 1000:.0f} ms in {len(self.generations)} garbage collection(s)"
            f" of generation(s) {sorted(set(self.generations))}"
        )


class Waited(NamedTuple):
    """A reported callback's raw figures: its thread's CPU time, its waits, its wall time."""

    cpu: float
    waits: int
    wall: float


def _report(
    handle: Any, held: float, waited: Waited, collected: str, path: str | None, lock: threading.Lock
) -> None:
    owner = getattr(getattr(handle, "_callback", None), "__self__", None)  # a task: its coroutine
    what = f"{handle!r} of {owner!r}" if isinstance(owner, asyncio.Task) else repr(handle)
    waits = f", {waited.waits} waits" if waited.waits else ""
    figures = f"{waited.wall * 1000:.0f} ms, {waited.cpu * 1000:.0f} ms of CPU{waits}{collected}"
    text = f"a callback held the event loop for {held * 1000:.0f} ms of CPU ({figures}): {what}"
    log.error("%s", text[:2000])
    if path is None:
        return
    with lock, open(path, "a", encoding="utf-8") as report:
        report.write(text[:2000].replace("\n", " ") + "\n")
