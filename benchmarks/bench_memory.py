"""Memory: the server's and the agent's RSS, sampled through a 10,000,000-line run.

RSS is sampled every 100 ms with psutil; the run's progress is read from the
size of its ``output.log`` (74 bytes a line), so the sample taken when the
first 1,000,000 lines are on disk can be compared with the last one taken
while the run was still going. Flat means the last sample is within 10% of
that one.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from benchmarks import arena, harness
from benchmarks.bench_capture import LINE_BYTES, flood_args
from benchmarks.harness import Section

FULL_LINES = 10_000_000
QUICK_LINES = 1_000_000
MARK_LINES = 1_000_000
SAMPLE_SECONDS = 0.1


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 2)
    lines = QUICK_LINES if quick else FULL_LINES
    mark = min(MARK_LINES, lines // 10) if quick else MARK_LINES
    section = Section("memory", f"RSS through a {lines:,}-line run (server and agent)")
    section.facts.update({"lines": lines, "repeats": repeats, "mark_lines": mark})
    for _ in range(repeats):
        samples = asyncio.run(_round(lines))
        at_mark = next((s for s in samples if s[1] >= mark * LINE_BYTES), samples[0])
        last = samples[-1]
        server_peak = max(s[2] for s in samples)
        agent_peak = max(s[3] for s in samples)
        section.figure("server_peak_mb", "MB", "<= 120").add(server_peak)
        section.figure("server_at_mark_mb", "MB").add(at_mark[2])
        section.figure("server_last_mb", "MB").add(last[2])
        section.figure("server_last/at_mark", "x", "<= 1.1").add(last[2] / at_mark[2])
        section.figure("agent_peak_mb", "MB", "<= 40").add(agent_peak)
        section.figure("agent_last_mb", "MB").add(last[3])
        section.figure("samples", "n").add(len(samples))
        section.figure("run_s", "s").add(last[0])
    return [section]


async def _round(lines: int) -> list[tuple[float, int, float, float]]:
    """(seconds since start, bytes on disk, server RSS MB, agent RSS MB) while the run is live."""
    job = harness.task_job("flood", "flood.py", *flood_args(lines, buffered=False)[1:])
    with harness.workspace([job]) as root:
        async with arena.session(root) as client:
            done = client.status_future(lambda p: p.get("status") in arena.FINAL)
            started, info = await arena.start(client, "flood")
            log_path = Path(info["logPath"])
            samples: list[tuple[float, int, float, float]] = []
            while True:
                server, agent = harness.rss_mb(client.pid), harness.rss_mb(info["agentPid"])
                if server is not None and agent is not None:
                    size = log_path.stat().st_size if log_path.exists() else 0
                    samples.append((time.perf_counter() - started, size, server, agent))
                if done.done():
                    break
                await asyncio.sleep(SAMPLE_SECONDS)
    if not samples:
        raise RuntimeError("no RSS sample was taken during the run")
    return samples
