"""Line latency: from the trainer's write to the editor (``arena/log``) and to the server (``arena/logs``).

The ticker stamps each line with ``time.perf_counter()`` just before it
writes it (on Linux the system-wide CLOCK_MONOTONIC, checked once by
``harness.check_shared_clock``); the client takes its own reading when the
line reaches it.

- To the editor: 100 lines a second, then 10,000 a second; each line's
  latency is measured when the ``arena/log`` notification carrying it is
  read. At 10,000 a second the rate bound may elide lines; latency is over
  the lines delivered, and the elided ones are counted.
- To the server: 100 lines a second, with the client polling ``arena/logs``
  (from its last cursor) every 5 ms; the reference is supervisord's
  ``tailProcessStdoutLog`` polled every 10 ms on the same ticker. The CPU
  the server and the agent spend meanwhile shows whether either busy-polls.
  A tick written before the start request returned is timed from that
  return, on both sides: a client cannot ask for a run it does not know yet
  (arena-ls starts the trainer before its agent has loaded, so the first
  ticks precede the answer). ``first_line_ms`` is the time from sending the
  start request to reading the first tick.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from benchmarks import arena, bench_scale, harness
from benchmarks.client import BenchClient
from benchmarks.harness import Section
from benchmarks.supervisord_runner import Program, Supervisord, running

RATES = (("100_per_s", 100.0), ("10k_per_s", 10_000.0))
EDITOR_TARGETS = {"100_per_s": ("<= 15", "<= 50"), "10k_per_s": (None, "<= 100")}
"""Issue 24: with the realistic manifest and a client polling arena/status every 200 ms."""
STATUS_PERIOD = 0.2
TAIL_BYTES = 1 << 16
"""``tailProcessStdoutLog`` returns the log's last TAIL_BYTES and its size (see ``_supervisord_round``)."""


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 3)
    seconds = 1.0 if quick else 4.0
    harness.check_shared_clock()
    editor = Section("editor_latency", "line latency to the editor (arena/log), 100/s then 10k/s")
    server = Section(
        "server_latency",
        "line latency to the server (arena/logs polled every 5 ms) vs supervisord's tail polled every 10 ms",
    )
    editor.facts.update({"seconds_per_rate": seconds, "repeats": repeats})
    server.facts.update({"seconds": seconds, "repeats": repeats})
    ticker_args = ["100", str(seconds)]
    with harness.scratch() as folder:
        program = Program(
            "ticker",
            [sys.executable, harness.trainer("ticker.py"), *ticker_args],
            env={"PYTHONUNBUFFERED": "1"},
        )
        with running(folder, [program]) as daemon:
            for _ in range(repeats):
                asyncio.run(_editor_round(editor, seconds))
                asyncio.run(_server_round(server, ticker_args))
                _supervisord_round(server, daemon)
    server.ratio(
        "first_line.arena/supervisord",
        server.figure("arena.first_line_ms", "ms"),
        server.figure("supervisord_tail.first_line_ms", "ms"),
        "<= 2",
    )
    return [editor, server]


def _add_percentiles(
    section: Section, prefix: str, latencies_ms: list[float], p50_target: str | None, p99_target: str | None
) -> None:
    section.figure(f"{prefix}.p50_ms", "ms", p50_target).add(harness.percentile(latencies_ms, 50))
    section.figure(f"{prefix}.p99_ms", "ms", p99_target).add(harness.percentile(latencies_ms, 99))
    section.figure(f"{prefix}.max_ms", "ms").add(max(latencies_ms) if latencies_ms else float("nan"))


# --------------------------------------------------------------------------- to the editor


async def _editor_round(section: Section, seconds: float) -> None:
    args = [a for _, rate in RATES for a in (str(rate), str(seconds))]
    job = harness.task_job("ticker", "ticker.py", *args)
    latencies: dict[int, list[float]] = {0: [], 1: []}

    def on_log(arrived: float, params: dict[str, Any]) -> None:
        for line in params.get("lines", []):
            text = line.get("text", "")
            if text.startswith("tick "):
                _, phase, _, stamp = text.split(" ")
                latencies[int(phase)].append((arrived - float(stamp)) * 1000.0)

    rtts: list[float] = []
    with bench_scale.realistic_workspace([job]) as root:
        async with arena.session(root) as client:
            client.on_log = on_log
            await arena.settled(client)
            async with bench_scale.status_polled(client, STATUS_PERIOD, rtts):
                _, final = await arena.run_to_end(client, "ticker")
            if final["status"] != "succeeded":
                raise RuntimeError(f"the ticker ended {final['status']}")
            await asyncio.sleep(0.3)  # the batcher's last flush
            _, summarised, summaries = arena.elided_in(client.log_batches)
    for phase, (name, rate) in enumerate(RATES):
        p50, p99 = EDITOR_TARGETS[name]
        _add_percentiles(section, name, latencies[phase], p50, p99)
        expected = int(rate * seconds)
        section.figure(f"{name}.delivered", "lines").add(len(latencies[phase]))
        section.figure(f"{name}.elided", "lines").add(expected - len(latencies[phase]))
    section.figure("summary_lines", "lines").add(summaries)
    section.figure("status_while_reading.p99_ms", "ms").add(harness.percentile(rtts, 99))
    section.figure("lines_in_summaries", "lines").add(summarised)


# --------------------------------------------------------------------------- to the server


async def _server_round(section: Section, ticker_args: list[str]) -> None:
    job = harness.task_job("ticker", "ticker.py", *ticker_args)
    with harness.workspace([job]) as root:
        async with arena.session(root) as client:
            await arena.settled(client)
            sent, info = await arena.start(client, "ticker")
            known = time.perf_counter()
            server_cpu = harness.CpuWatch(client.pid, interval=0.25)
            agent_cpu = harness.CpuWatch(info["agentPid"], interval=0.05)
            latencies, first = await _poll_logs(client, info["runId"], period=0.005, known_at=known)
            wall = time.perf_counter() - known
            server_used, agent_used = server_cpu.finish(), agent_cpu.finish()
    _add_percentiles(section, "arena", latencies, None, "<= 20")
    section.figure("arena.lines", "lines").add(len(latencies))
    section.figure("arena.first_line_ms", "ms").add((first - sent) * 1000.0)
    section.figure("arena.server_cpu_share", "cpu/s").add((server_used or 0.0) / wall)
    section.figure("arena.agent_cpu_share", "cpu/s").add((agent_used or 0.0) / wall)


async def _poll_logs(
    client: BenchClient, run_id: str, period: float, known_at: float
) -> tuple[list[float], float]:
    """Poll ``arena/logs`` every ``period`` until the ticker is done; each tick's latency in ms.

    A tick written before ``known_at`` (when the start request returned: the
    client cannot ask for a run it does not know yet) is timed from then.
    Also returns when the first tick was read.
    """
    latencies: list[float] = []
    first = 0.0
    cursor = None
    next_poll = time.perf_counter()
    deadline = time.monotonic() + 120.0
    while time.monotonic() < deadline:
        page = await client.call("arena/logs", {"runId": run_id, "cursor": cursor, "limit": 1000})
        arrived = time.perf_counter()
        cursor = page["cursor"]
        for line in page["lines"]:
            text = line["text"]
            if text.startswith("tick "):
                first = first or arrived
                latencies.append((arrived - max(known_at, float(text.rsplit(" ", 1)[1]))) * 1000.0)
            elif text == "ticker done":
                return latencies, first
        next_poll += period
        await asyncio.sleep(max(0.0, next_poll - time.perf_counter()))
    raise TimeoutError("the ticker never finished")


def _supervisord_round(section: Section, daemon: Supervisord, period: float = 0.010) -> None:
    sent = time.perf_counter()
    daemon.start_program("ticker")
    known_at = time.perf_counter()
    first = 0.0
    latencies: list[float] = []
    offset = 0
    pending = b""
    next_poll = time.perf_counter()
    deadline = time.monotonic() + 120.0
    done = False
    while not done and time.monotonic() < deadline:
        data, size, _ = daemon.rpc.supervisor.tailProcessStdoutLog("ticker", offset, TAIL_BYTES)
        arrived = time.perf_counter()
        fresh = size - offset  # the tail ends at ``size``: keep only what is new since ``offset``
        raw = data.encode() if isinstance(data, str) else data
        pending += raw[len(raw) - fresh :] if 0 < fresh <= len(raw) else b""
        if fresh > len(raw):
            raise RuntimeError("supervisord's tail overflowed: poll faster or ask for more bytes")
        offset = size
        *complete, pending = pending.split(b"\n")
        for raw in complete:
            text = raw.decode()
            if text.startswith("tick "):
                first = first or arrived
                latencies.append((arrived - max(known_at, float(text.rsplit(" ", 1)[1]))) * 1000.0)
            elif text == "ticker done":
                done = True
        next_poll += period
        time.sleep(max(0.0, next_poll - time.perf_counter()))
    daemon.wait_state("ticker", {"EXITED", "FATAL", "BACKOFF"})
    _add_percentiles(section, "supervisord_tail", latencies, None, None)
    section.figure("supervisord_tail.lines", "lines").add(len(latencies))
    section.figure("supervisord_tail.first_line_ms", "ms").add((first - sent) * 1000.0)
