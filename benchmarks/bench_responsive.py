"""Responsiveness under a flood: ``arena/status`` round trips, one every 20 ms, while a trainer floods.

The flood is the capture benchmark's trainer at full speed (unbuffered, as
arena-ls runs trainers, and buffered). The client sends ``arena/status``
every 20 ms from the moment ``arena/start`` answers until the run's final
``arena/statusChanged``, and times each round trip.
"""

from __future__ import annotations

import asyncio
import time

from benchmarks import arena, bench_scale, harness
from benchmarks.bench_capture import FULL_LINES, MODES, QUICK_LINES, flood_args
from benchmarks.client import BenchClient
from benchmarks.harness import Section

PERIOD = 0.020


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 3)
    lines = QUICK_LINES if quick else FULL_LINES
    section = Section("responsiveness", f"arena/status round trips every 20 ms during a {lines:,}-line flood")
    section.facts.update({"lines": lines, "repeats": repeats})
    for _ in range(repeats):
        for mode, buffered in MODES:
            rtts = asyncio.run(_round(lines, buffered))
            section.figure(f"{mode}.p50_ms", "ms").add(harness.percentile(rtts, 50))
            section.figure(f"{mode}.p99_ms", "ms", "<= 20").add(harness.percentile(rtts, 99))
            section.figure(f"{mode}.max_ms", "ms").add(max(rtts))
            section.figure(f"{mode}.requests", "calls").add(len(rtts))
    return [section]


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
