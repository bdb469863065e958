"""Hostile trainers open in the editor (issue 39 item 6): ``arena/status`` while the gates check them.

Fifteen jobs whose scripts are the files of ``tests/helpers/hostile_gates.py``
(200,000-deep nesting, a 3,000-helper chain, 50,000 lines, 2.6 MB, Latin-1,
NULs, 20,000 decorators...), all opened at once. The client then sends
``arena/status`` every 50 ms until no job says the gates are still checking
it, and times each round trip, from the first one after ``initialized`` (it may
wait up to three seconds for the lints it began before issue 38 item 7, and for them all
before issue 39; now it never waits, ``protocol/jobs.py``). The server's resident
memory and the gates' worker's are sampled at each round trip.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import psutil
from lsprotocol import types

from benchmarks import arena, harness
from benchmarks.client import BenchClient
from benchmarks.harness import Section
from tests.helpers.hostile_gates import hostile_sources

PERIOD = 0.050
GIVE_UP = 300.0


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or 1
    section = Section("hostile_gates", "arena/status every 50 ms while 15 hostile trainers are checked")
    section.facts["files"] = len(hostile_sources())
    for _ in range(repeats):
        rtts, first, server_mb, worker_mb, seconds = asyncio.run(_round())
        section.figure("first_status_ms", "ms", "<= 100").add(first)
        section.figure("p50_ms", "ms").add(harness.percentile(rtts, 50))
        section.figure("p99_ms", "ms", "<= 100").add(harness.percentile(rtts, 99))
        section.figure("max_ms", "ms").add(max(rtts))
        section.figure("server_rss_peak_mb", "MB").add(server_mb)
        section.figure("worker_rss_peak_mb", "MB", "<= 400").add(worker_mb)
        section.figure("all_checked_s", "s").add(seconds)
    return [section]


def _jobs(names: list[str]) -> list[dict[str, object]]:
    return [
        {
            "id": name.removesuffix(".py"),
            "name": name,
            "kind": "train",
            "status": "ready",
            "command": "{python}",
            "script": name,
            "args": [name],
            "resume": {"args": ["--resume", "--start-step", "{step}"]},
        }
        for name in names
    ]


async def _round() -> tuple[list[float], float, float, float, float]:
    sources = hostile_sources()
    with harness.workspace(_jobs(list(sources))) as root:
        for name, data in sources.items():
            (root / name).write_bytes(data)
        async with arena.session(root) as client:
            began = time.perf_counter()  # no settling first: its status would lint them all
            for name, data in sources.items():
                _open(client, root / name, data)
            return await _status_loop(client, began)


def _open(client: BenchClient, path: Path, data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=path.as_uri(), language_id="python", version=1, text=text
            )
        )
    )


async def _status_loop(client: BenchClient, began: float) -> tuple[list[float], float, float, float, float]:
    rtts: list[float] = []
    server = psutil.Process(client.pid)
    server_mb = worker_mb = 0.0
    while time.perf_counter() - began < GIVE_UP:
        sent = time.perf_counter()
        status = await client.call("arena/status", {})
        rtts.append((time.perf_counter() - sent) * 1000.0)
        server_mb = max(server_mb, server.memory_info().rss / (1 << 20))
        worker_mb = max(worker_mb, _worker_rss(server))
        checking = [
            job for job in status["jobs"] if any("still checking" in d["message"] for d in job["blockedBy"])
        ]
        if not checking and len(rtts) > 1:
            break
        await asyncio.sleep(PERIOD)
    return rtts[1:] or rtts, rtts[0], server_mb, worker_mb, time.perf_counter() - began


def _worker_rss(server: psutil.Process) -> float:
    for child in server.children():
        try:
            if "arena_ls.gates.worker" in " ".join(child.cmdline()):
                return float(child.memory_info().rss) / (1 << 20)
        except psutil.Error:
            continue
    return 0.0
