"""A small log cap under a flood (issue 39, item 7): the same flood capped at 64 KB and uncapped.

``benchmarks/trainers/flood.py`` writes N lines of 74 bytes through a real
arena-ls (``arena/start`` until the ``arena/statusChanged`` that says
``succeeded``), once with ``logs.maxRunMb`` 2048 (the default: nothing is
dropped) and once with 0.0625 (64 KB, the smallest cap: nearly every byte
passes through a tail segment that is dropped), interleaved in each repeat,
unbuffered (one ``write`` a line, as arena-ls runs trainers) and
block-buffered. The figure is the capped run's wall time over the uncapped
one's; before issue 39 a 16 KB tail segment cost three synced rewrites of
``output.segments.json`` (60-200x the uncapped write), now a segment is at
least 1 MiB (``logsegments.SEGMENT_FLOOR_BYTES``). Each capped run also
reports the log's size on disk (head and tails: the cap plus at most one
segment) and the table's commits per MB of flood (from the file's renames:
counted by the writer as ``commits``, not visible from outside, so the
segment count of the run folder stands for it: ``tails_made``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from benchmarks import arena, bench_capture, harness
from benchmarks.harness import Section

FULL_LINES = 2_000_000
QUICK_LINES = 200_000
CAP_MB = 0.0625
UNCAPPED_MB = 2048
TARGET = "<= 1.5"
_TAIL = re.compile(r"output(\.t\d+)?\.(log|idx)")


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    lines = QUICK_LINES if quick else FULL_LINES
    repeats = repeats or (1 if quick else 3)
    section = Section(
        "capped_log",
        f"flood of {lines:,} lines ({lines * bench_capture.LINE_BYTES / 1e6:.0f} MB) "
        f"under logs.maxRunMb {CAP_MB} (64 KB) vs {UNCAPPED_MB}",
    )
    section.facts["lines"] = lines
    section.facts["repeats"] = repeats
    section.facts["load_at_start"] = os.getloadavg()[0]
    for _ in range(repeats):
        for mode, buffered in bench_capture.MODES:
            uncapped = asyncio.run(_flood(lines, buffered, UNCAPPED_MB))
            capped = asyncio.run(_flood(lines, buffered, CAP_MB))
            section.figure(f"{mode}.uncapped_s", "s").add(uncapped["seconds"])
            section.figure(f"{mode}.capped_s", "s").add(capped["seconds"])
            section.figure(f"{mode}.capped_disk_kb", "KB").add(capped["disk"] / 1024)
            section.figure(f"{mode}.capped_tails_per_mb", "/MB").add(capped["tails"] / capped["mb"])
    for mode, _ in bench_capture.MODES:
        section.ratio(
            f"{mode}.capped/uncapped",
            section.figures[f"{mode}.capped_s"],
            section.figures[f"{mode}.uncapped_s"],
            target=TARGET,
        )
    section.facts["load_at_end"] = os.getloadavg()[0]
    return [section]


async def _flood(lines: int, buffered: bool, cap_mb: float) -> dict[str, Any]:
    """One flood through arena-ls under ``cap_mb``: its seconds, the log's bytes on disk and the
    tail segments it made."""
    job = harness.task_job("flood", "flood.py", *bench_capture.flood_args(lines, buffered)[1:])
    with harness.workspace([job]) as root:
        async with arena.session(root, {"logs": {"maxRunMb": cap_mb}}) as client:
            await arena.settled(client)
            os.sync()
            seconds, final = await arena.run_to_end(client, "flood")
            if final["status"] != "succeeded":
                raise RuntimeError(
                    f"the flood under {cap_mb} MB ended {final['status']}: {final.get('failure')}"
                )
            folder = root / ".aide" / "training" / "runs" / final["runId"]
            table = _table(folder)
            disk = _disk(folder)
    return {
        "seconds": seconds,
        "disk": disk,
        "tails": table["tails"][-1][0] if table else 0,
        "mb": lines * bench_capture.LINE_BYTES / (1 << 20),
    }


def _table(folder: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((folder / "output.segments.json").read_text()))
    except (OSError, ValueError):
        return None


def _disk(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir() if _TAIL.fullmatch(path.name))


if __name__ == "__main__":
    started = time.perf_counter()
    for result in run(quick=True):
        result.seconds = time.perf_counter() - started
        result.print()
