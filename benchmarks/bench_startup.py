"""Startup: ``initialize`` round trip of arena-ls over that of a bare pygls server.

Each figure is the time from spawning the server process to the
``initialize`` response, which is what an editor waits for when it opens a
workspace (the interpreter's start and the server's imports included; the
request is written at once and waits in the pipe). The two servers are
started alternately, several times; the ratio is taken per pair.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.client import BenchClient, server_argv
from benchmarks.harness import Section

BARE = [sys.executable, str(harness.BENCH_DIR / "bare_server.py")]


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (2 if quick else 9)
    section = Section("startup", "spawn to initialize response: arena-ls vs a bare pygls server")
    section.facts["repeats"] = repeats
    with harness.workspace([harness.task_job("sleeper", "sleeper.py")]) as root:
        asyncio.run(_initialize(BARE, root))  # warm the file cache for both before timing
        asyncio.run(_initialize(server_argv(), root))
        for _ in range(repeats):
            section.figure("bare_pygls_ms", "ms").add(asyncio.run(_initialize(BARE, root)))
            section.figure("arena_ls_ms", "ms").add(asyncio.run(_initialize(server_argv(), root)))
    section.ratio(
        "arena/bare", section.figures["arena_ls_ms"], section.figures["bare_pygls_ms"], target="<= 1.3"
    )
    return [section]


async def _initialize(argv: list[str], root: Path) -> float:
    """Milliseconds from spawning ``argv`` to its ``initialize`` response; then shut it down."""
    client = BenchClient()
    started = time.perf_counter()
    # cwd is the workspace, as an editor starts a server: with ``-m`` the cwd comes first on
    # sys.path, and the repository there would shadow a ``--product`` checkout.
    await client.launch(argv, stderr_path=root / "startup.stderr", cwd=root)
    await client.initialize_session(root, {"python": sys.executable})
    elapsed = (time.perf_counter() - started) * 1000.0
    await client.close()
    return elapsed
