"""Responsiveness under a flood: ``arena/status`` round trips, one every 20 ms, while a trainer floods.

The flood is the capture benchmark's trainer at full speed (unbuffered, as
arena-ls runs trainers, and buffered). The client sends ``arena/status``
every 20 ms from the moment ``arena/start`` answers until the run's final
``arena/statusChanged``, and times each round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import arena, bench_scale, harness
from benchmarks.bench_capture import FULL_LINES, MODES, QUICK_LINES, flood_args
from benchmarks.client import BenchClient
from benchmarks.harness import Section

PERIOD = 0.020
LOOP_LIMIT_MS = 5.0
"""Issue 24: nothing on the event loop over 5 ms while a run streams. The server is run with
``arena_ls/loopcheck.py``'s check at this limit, and each callback over it is counted."""
HELD = re.compile(r"held the event loop for (\d+) ms of CPU")


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 3)
    lines = QUICK_LINES if quick else FULL_LINES
    section = Section("responsiveness", f"arena/status round trips every 20 ms during a {lines:,}-line flood")
    section.facts.update({"lines": lines, "repeats": repeats})
    for _ in range(repeats):
        for mode, buffered in MODES:
            with _loop_watched() as report:
                rtts = asyncio.run(_round(lines, buffered))
                text = report.read_text() if report.exists() else ""
                held = [int(m.group(1)) for m in HELD.finditer(text)]
            if held:  # which callback it was, for the figure's reader (one line per callback)
                slowest = max(text.splitlines(), key=_held_ms)
                section.facts.setdefault(f"{mode}.loop_slowest", []).append(slowest[:400])
            section.figure(f"{mode}.loop_callbacks_over_5ms", "calls", "<= 0").add(len(held))
            section.figure(f"{mode}.loop_longest_over_5ms", "ms").add(max(held, default=0))
            section.figure(f"{mode}.p50_ms", "ms").add(harness.percentile(rtts, 50))
            section.figure(f"{mode}.p99_ms", "ms", "<= 20").add(harness.percentile(rtts, 99))
            section.figure(f"{mode}.max_ms", "ms").add(max(rtts))
            section.figure(f"{mode}.requests", "calls").add(len(rtts))
    return [section]


def _held_ms(report_line: str) -> int:
    match = HELD.search(report_line)
    return int(match.group(1)) if match else 0


@contextlib.contextmanager
def _loop_watched() -> Iterator[Path]:
    """The servers started meanwhile report each event-loop callback over ``LOOP_LIMIT_MS`` of
    CPU into the file yielded (``ARENA_SLOW_CALLBACK_MS`` / ``_LOG``; 0 there: none over it)."""
    saved = {name: os.environ.get(name) for name in ("ARENA_SLOW_CALLBACK_MS", "ARENA_SLOW_CALLBACK_LOG")}
    with tempfile.TemporaryDirectory(prefix="arena-loop-") as folder:
        report = Path(folder) / "slow-callbacks.log"
        os.environ["ARENA_SLOW_CALLBACK_MS"] = str(LOOP_LIMIT_MS)
        os.environ["ARENA_SLOW_CALLBACK_LOG"] = str(report)
        try:
            yield report
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


async def _round(lines: int, buffered: bool) -> list[float]:
    job = harness.task_job("flood", "flood.py", *flood_args(lines, buffered)[1:])
    with bench_scale.realistic_workspace([job]) as root:
        async with arena.session(root) as client:
            done = client.status_future(lambda p: p.get("status") in arena.FINAL)
            await arena.start(client, "flood")
            return await _status_loop(client, done)


async def _status_loop(client: BenchClient, done: asyncio.Future[float]) -> list[float]:
    """Round trips in ms until the run ends (at least one, however short the flood)."""
    rtts: list[float] = []
    next_call = time.perf_counter()
    while not rtts or not done.done():
        sent = time.perf_counter()
        await client.call("arena/status", {})
        rtts.append((time.perf_counter() - sent) * 1000.0)
        next_call += PERIOD
        await asyncio.sleep(max(0.0, next_call - time.perf_counter()))
    return rtts
