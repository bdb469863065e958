"""Capture under a flood: arena-ls against supervisord and the floor; ingest; notification budget.

A trainer writes N lines of 74 bytes as fast as it can (5,000,000 lines,
370 MB), once with ``PYTHONUNBUFFERED=1`` (one ``write`` per line, as
arena-ls runs trainers) and once block-buffered. In each repeat and mode,
side by side:

- the floor: the same trainer with stdout on ``/dev/null``, then on a file;
- supervisord: ``startProcess`` over its unix-socket XML-RPC, polled every
  20 ms with ``getProcessInfo`` until EXITED, stdout to ``stdout_logfile``;
- arena-ls: ``arena/start`` until the ``arena/statusChanged`` that says
  ``succeeded``, through a real stdio session.

Then, after one unbuffered arena-ls flood, ``arena/logs`` pages through the
whole run, checking every line is there, once, in order (ingest). Every
arena-ls flood also yields the notification budget: the bytes of
``arena/log`` messages per second the client received, and how the lines
past the rate bound were summarised.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import arena, bench_scale, harness
from benchmarks.client import BenchClient
from benchmarks.harness import Section
from benchmarks.supervisord_runner import Program, Supervisord, running

LINE_BYTES = 74
FULL_LINES = 5_000_000
QUICK_LINES = 100_000
MODES = (("unbuffered", False), ("buffered", True))
NOTIFY_TARGETS = {"peak_bytes_per_s": "<= 2000000", "lines_unaccounted": "<= 0", "status_p99_ms": "<= 20"}
STATUS_PERIOD = 0.020
"""While arena-ls captures a flood, a client polls ``arena/status`` this often (issue 24), with the
realistic manifest (``bench_scale.realistic_workspace``); supervisord's own run is polled with
``getProcessInfo`` every 20 ms too."""
"""At most 2 MB/s of ``arena/log``, and every line not shown counted in a summary line.

``lines_unaccounted`` = lines flooded - lines delivered - lines counted in
"… N lines not shown" summaries; a few of arena-ls's own lines can be
summarised too, which makes it slightly negative."""
LOGS_PAGE = 10_000
INGEST_UNITS = {"page_through_s": "s", "lines_per_s": "line/s", "server_cpu_s": "s", "client_cpu_s": "s"}


def flood_args(lines: int, buffered: bool) -> list[str]:
    return [harness.trainer("flood.py"), str(lines), *(["--buffered"] if buffered else [])]


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    lines = QUICK_LINES if quick else FULL_LINES
    repeats = repeats or (1 if quick else 3)
    capture = Section(
        "capture",
        f"flood of {lines:,} lines ({lines * LINE_BYTES / 1e6:.0f} MB): arena-ls vs supervisord vs the floor",
    )
    notify = Section("notify", "arena/log bytes per second during the floods (rate bound)")
    ingest = Section("ingest", "arena/logs pages through every line of an unbuffered flood")
    capture.facts["lines"] = lines
    capture.facts["repeats"] = repeats
    with harness.scratch() as folder:
        programs = [
            Program(
                f"flood-{mode}",
                [sys.executable, *flood_args(lines, buffered)],
                env={} if buffered else {"PYTHONUNBUFFERED": "1"},
            )
            for mode, buffered in MODES
        ]
        with running(folder, programs) as daemon:
            for repeat in range(repeats):
                for mode, buffered in MODES:
                    check_ingest = repeat == repeats - 1 and not buffered
                    _one_round(capture, notify, ingest, daemon, folder, lines, mode, buffered, check_ingest)
    for mode, _ in MODES:
        arena_t = capture.figures[f"{mode}.arena_s"]
        capture.ratio(
            f"{mode}.arena/supervisord", arena_t, capture.figures[f"{mode}.supervisord_s"], target="<= 1.0"
        )
        capture.ratio(
            f"{mode}.arena/floor_devnull",
            arena_t,
            capture.figures[f"{mode}.floor_devnull_s"],
            target="<= 1.3",
        )
        capture.ratio(f"{mode}.arena/floor_file", arena_t, capture.figures[f"{mode}.floor_file_s"])
        capture.ratio(
            f"{mode}.supervisord/floor_devnull",
            capture.figures[f"{mode}.supervisord_s"],
            capture.figures[f"{mode}.floor_devnull_s"],
        )
    return [capture, ingest, notify]


def _one_round(
    capture: Section,
    notify: Section,
    ingest: Section,
    daemon: Supervisord,
    folder: Path,
    lines: int,
    mode: str,
    buffered: bool,
    check_ingest: bool,
) -> None:
    env = harness.trainer_env(unbuffered=not buffered)
    capture.figure(f"{mode}.floor_devnull_s", "s").add(_floor(lines, buffered, env, Path(os.devnull)))
    out = folder / "floor.out"
    capture.figure(f"{mode}.floor_file_s", "s").add(_floor(lines, buffered, env, out))
    out.unlink()
    capture.figure(f"{mode}.supervisord_s", "s").add(_supervisord(daemon, f"flood-{mode}", lines))
    seconds, budget, checked = asyncio.run(_arena(lines, buffered, check_ingest))
    capture.figure(f"{mode}.arena_s", "s").add(seconds)
    for key, unit, value in budget:
        notify.figure(f"{mode}.{key}", unit, NOTIFY_TARGETS.get(key)).add(value)
    if checked is not None:
        for key, value in checked.items():
            if isinstance(value, float):
                ingest.figure(key, INGEST_UNITS.get(key, "")).add(value)
            else:
                ingest.facts[key] = value


def _floor(lines: int, buffered: bool, env: dict[str, str], target: Path) -> float:
    os.sync()
    with open(target, "wb") as sink:
        start = time.perf_counter()
        subprocess.run([sys.executable, *flood_args(lines, buffered)], stdout=sink, env=env, check=True)
        return time.perf_counter() - start


def _supervisord(daemon: Supervisord, name: str, lines: int) -> float:
    os.sync()
    start = time.perf_counter()
    daemon.start_program(name)
    seen, info = daemon.wait_state(name, {"EXITED", "FATAL", "BACKOFF"})
    if info["statename"] != "EXITED" or info["exitstatus"] != 0:
        raise RuntimeError(f"supervisord's flood ended {info['statename']} ({info['exitstatus']})")
    size = daemon.log_size(name)
    if size != lines * LINE_BYTES:
        raise RuntimeError(f"supervisord captured {size} bytes, not {lines * LINE_BYTES}")
    return seen - start


async def _arena(
    lines: int, buffered: bool, check_ingest: bool
) -> tuple[float, list[tuple[str, str, float]], dict[str, Any] | None]:
    job = harness.task_job("flood", "flood.py", *flood_args(lines, buffered)[1:])
    rtts: list[float] = []
    with bench_scale.realistic_workspace([job]) as root:
        async with arena.session(root) as client:
            await arena.settled(client)
            os.sync()
            async with bench_scale.status_polled(client, STATUS_PERIOD, rtts):
                seconds, final = await arena.run_to_end(client, "flood")
            if final["status"] != "succeeded":
                raise RuntimeError(f"the arena-ls flood ended {final['status']}: {final.get('failure')}")
            await asyncio.sleep(0.3)  # the batcher's last flush (at most 10 a second)
            budget = _budget(client, lines, seconds)
            budget.append(("status_p99_ms", "ms", harness.percentile(rtts, 99)))
            budget.append(("status_calls", "calls", float(len(rtts))))
            checked = await _page_all(client, final["runId"], lines) if check_ingest else None
    return seconds, budget, checked


def _budget(client: BenchClient, lines: int, seconds: float) -> list[tuple[str, str, float]]:
    """Peak bytes in any one-second window, the mean rate, and how the elided lines were told."""
    sizes = client.log_bytes
    peak = 0
    start = 0
    window = 0
    for arrived, size in sizes:
        window += size
        while sizes[start][0] <= arrived - 1.0:
            window -= sizes[start][1]
            start += 1
        peak = max(peak, window)
    total = sum(size for _, size in sizes)
    span = max(seconds, 1.0)  # "per second" over at least one second
    delivered, summarised, summaries = arena.elided_in(client.log_batches)
    return [
        ("peak_bytes_per_s", "B/s", float(peak)),
        ("mean_bytes_per_s", "B/s", total / span),
        ("lines_delivered", "lines", float(delivered)),
        ("lines_summarised", "lines", float(summarised)),
        ("summary_lines", "lines", float(summaries)),
        ("lines_unaccounted", "lines", float(lines - delivered - summarised)),
    ]


async def _page_all(client: BenchClient, run_id: str, lines: int) -> dict[str, Any]:
    """Page through the run with ``arena/logs``; check every trainer line once, in order."""
    expected = 0
    next_seq: int | None = None
    problems: list[str] = []
    cursor = None
    pages = 0
    read = 0
    server_cpu = harness.CpuWatch(client.pid, interval=0.5)
    client_cpu = time.process_time()
    start = time.perf_counter()
    while True:
        page = await client.call("arena/logs", {"runId": run_id, "cursor": cursor, "limit": LOGS_PAGE})
        pages += 1
        for line in page["lines"]:
            if next_seq is not None and line["seq"] != next_seq and len(problems) < 5:
                problems.append(f"seq {line['seq']} after {next_seq - 1}")
            next_seq = line["seq"] + 1
            if line["stream"] != "stdout":
                continue
            read += 1
            number = int(line["text"].split(" ", 1)[0]) - 10**10
            if number != expected and len(problems) < 5:
                problems.append(f"line {number} where {expected} was expected")
            expected = number + 1 if number >= expected else expected
        cursor = page["cursor"]
        if not page["lines"] and page["done"]:
            break
        if not page["lines"] and pages > lines:
            problems.append("paging stalled")
            break
    elapsed = time.perf_counter() - start
    return {
        "server_cpu_s": server_cpu.finish() or 0.0,
        "client_cpu_s": time.process_time() - client_cpu,
        "page_through_s": elapsed,
        "lines_per_s": lines / elapsed if elapsed else 0.0,
        "stdout_lines_read": read,
        "last_line_number_plus_one": expected,
        "expected_lines": lines,
        "pages": pages,
        "page_limit": LOGS_PAGE,
        "complete_in_order_no_repeats": read == expected == lines and not problems,
        "problems": problems,
    }
