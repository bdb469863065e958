"""Running trainers through a real ``arena-ls`` session: start, wait, stop, page the logs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil

from arena_ls.agent.launch import SPARE_FLAG
from arena_ls.lifecycle.spare import DISABLE_VARIABLE
from arena_ls.platform import SPARE_AGENT
from arena_ls.protocol.backends import SPARE_WHEN_IDLE_FOR
from benchmarks.client import BenchClient, open_session

FINAL = {"stopped", "succeeded", "crashed", "lost"}
SUMMARY_COUNT = re.compile(r"(\d+) lines not shown")


@contextlib.asynccontextmanager
async def session(root: Path, settings: dict[str, Any] | None = None) -> AsyncIterator[BenchClient]:
    """An initialized arena-ls on ``root`` (with ``settings`` beside ``python``); shut down (never
    killed) afterwards."""
    client = await open_session(root, root / "arena-ls.stderr", options=settings)
    try:
        yield client
    finally:
        await client.close()


async def settled(client: BenchClient) -> None:
    """Wait until the server has done what follows ``initialized`` (one ``arena/status`` round trip).

    supervisord is up and idle before its programs are timed; so is arena-ls.
    Its own start-up is what the startup benchmark measures. Being idle
    includes the spare job agent the server loads for its next run
    (``arena_ls/lifecycle/spare.py``): this waits until it has loaded (its
    loading thread has ended), as a user's server has long before they
    press Run. With ``ARENA_NO_SPARE_AGENT=1`` there is none to wait for.
    """
    await client.call("arena/status", {})
    if os.environ.get(DISABLE_VARIABLE) != "1" and SPARE_AGENT:
        await _spare_loaded(client.pid)


SPARE_APPEARS_WITHIN = SPARE_WHEN_IDLE_FOR + 2.0
"""The server loads its spare once the workspace was idle ``SPARE_WHEN_IDLE_FOR`` seconds; a spare
that has not appeared 2 s after that is not coming (an older ``--product``, spares switched off)."""


async def _spare_loaded(server_pid: int, appear: float = SPARE_APPEARS_WITHIN, load: float = 10.0) -> None:
    """Until the server's spare agent has loaded; soon if none appears (an older ``--product``)."""
    started = time.monotonic()
    while True:
        spares = _spares(server_pid)
        if any(spares):
            return
        waited = time.monotonic() - started
        if waited > (load if spares else appear):
            return
        await asyncio.sleep(0.05)  # before anything is timed: a reading of /proc less often


def _spares(server_pid: int) -> list[bool]:
    """Whether each of the server's spare agents is loaded: one thread left, blocked reading its stdin.

    Linux: ``/proc/PID/syscall`` starts with ``0 0x0`` (``read`` of fd 0) while
    it waits for its order; a freshly started spare has one thread too, so
    the thread count alone would not say it has loaded.
    """
    found = []
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process(server_pid).children():
            with contextlib.suppress(psutil.Error, OSError):
                if SPARE_FLAG in child.cmdline():
                    syscall = Path(f"/proc/{child.pid}/syscall").read_text()
                    found.append(child.num_threads() == 1 and syscall.startswith("0 0x0 "))
    return found


async def start(client: BenchClient, job_id: str) -> tuple[float, dict[str, Any]]:
    """``arena/start``; (perf_counter just before sending, RunInfo)."""
    sent = time.perf_counter()
    info = await client.call("arena/start", {"id": job_id})
    return sent, info


async def run_to_end(
    client: BenchClient, job_id: str, timeout: float = 900.0
) -> tuple[float, dict[str, Any]]:
    """Start a job and wait for its final ``arena/statusChanged``: (seconds, final RunInfo)."""
    done = client.status_future(lambda p: p.get("jobId") == job_id and p.get("status") in FINAL)
    sent, _ = await start(client, job_id)
    arrived = await asyncio.wait_for(done, timeout)
    final = next(p for t, p in reversed(client.statuses) if t == arrived and p.get("jobId") == job_id)
    return arrived - sent, final


async def wait_line(client: BenchClient, run_id: str, text: str, timeout: float = 60.0) -> str:
    """Poll ``arena/logs`` from the start until a line containing ``text`` appears; return it."""
    deadline = time.monotonic() + timeout
    cursor = None
    while time.monotonic() < deadline:
        page = await client.call("arena/logs", {"runId": run_id, "cursor": cursor, "limit": 1000})
        for line in page["lines"]:
            if text in line["text"]:
                return str(line["text"])
        cursor = page["cursor"]
        await asyncio.sleep(0.02)
    raise TimeoutError(f"run {run_id} never printed {text!r}")


def elided_in(batches: list[tuple[float, dict[str, Any]]]) -> tuple[int, int, int]:
    """(trainer lines delivered, lines summarised as not shown, summary lines) over ``arena/log`` batches."""
    delivered = summarised = summaries = 0
    for _, params in batches:
        for line in params.get("lines", []):
            if line.get("summary"):
                summaries += 1
                match = SUMMARY_COUNT.search(line.get("text", ""))
                summarised += int(match.group(1)) if match else 0
            elif line.get("stream") != "arena":
                delivered += 1
    return delivered, summarised, summaries
