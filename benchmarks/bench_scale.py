"""Scale (issue 24): ``arena/status`` with big manifests and a long history, paged metrics, RSS.

- ``scale``: ``arena/status`` round trips (one every 20 ms, after a first one
  that is timed on its own) with manifests of 2 jobs, the realistic one (the
  bundled jobs of ``training/manifest.json`` plus 20 generated: 10 ``train``,
  10 ``task``) and 500 jobs (250 ``train`` + 250 ``task``).
- ``history``: the same with 500 jobs and 5,000 finished runs in the state
  folder (copies of one real run, each with its own id), the size of the
  answer, and ``arena/runs`` paging through all of them; the server's RSS.
- ``checkpoints``: a run that announced 1,000,000 checkpoints (10,000 with
  ``--quick``): ``arena/metrics`` paged through them, and the server's RSS
  after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from benchmarks import arena, harness
from benchmarks.client import BenchClient
from benchmarks.harness import Section
from tests.helpers.history import clone_runs

PERIOD = 0.020
FULL_CALLS = 100
QUICK_CALLS = 15
FULL_RUNS = 5000
QUICK_RUNS = 300
FULL_CHECKPOINTS = 1_000_000
QUICK_CHECKPOINTS = 10_000


def bundled_jobs() -> list[dict[str, Any]]:
    """The jobs of the repository's own manifest (``training/train.py`` is copied beside it)."""
    manifest = json.loads((harness.REPO / "training" / "manifest.json").read_text())
    return list(manifest["jobs"])


def generated_jobs(train: int, task: int) -> list[dict[str, Any]]:
    """``train`` jobs of the bundled trainer (each its own checkpoint folder) and ``task`` jobs."""
    jobs: list[dict[str, Any]] = []
    for index in range(train):
        jobs.append(
            {
                "id": f"gen-train-{index}",
                "name": f"Generated train {index}",
                "kind": "train",
                "command": "{python}",
                "script": "training/train.py",
                "args": ["training/train.py", "--steps", "600", "--ckpt-dir", f"checkpoints/gen-{index}"],
                "resume": {"args": ["--resume", "--start-step", "{step}"]},
                "checkpoint": {"pattern": r"saved checkpoint .* at step (?P<step>\d+)"},
                "status": "ready",
            }
        )
    for index in range(task):
        jobs.append(harness.task_job(f"gen-task-{index}", "sleeper.py", "0"))
    return jobs


def manifests() -> dict[str, list[dict[str, Any]]]:
    return {
        "2_jobs": generated_jobs(1, 1),
        "realistic": [*bundled_jobs(), *generated_jobs(10, 10)],
        "500_jobs": generated_jobs(250, 250),
    }


def prepare(root: Path) -> None:
    """Put the bundled trainer where the bundled and generated jobs name it."""
    shutil.copy(harness.REPO / "training" / "train.py", root / "training" / "train.py")


@contextlib.contextmanager
def realistic_workspace(jobs: list[dict[str, Any]]) -> Iterator[Path]:
    """A workspace whose manifest is the realistic one (bundled + 20 generated) plus ``jobs``."""
    with harness.workspace([*bundled_jobs(), *generated_jobs(10, 10), *jobs]) as root:
        prepare(root)
        yield root


async def poll_status(client: BenchClient, period: float, rtts: list[float], stop: asyncio.Event) -> None:
    """``arena/status`` every ``period`` seconds (an editor's status bar), round trips into ``rtts``,
    until ``stop`` is set (a call under way is let finish: cancelling it confuses the client)."""
    next_call = time.perf_counter()
    while not stop.is_set():
        sent = time.perf_counter()
        await client.call("arena/status", {})
        rtts.append((time.perf_counter() - sent) * 1000.0)
        next_call += period
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, next_call - time.perf_counter()))


@contextlib.asynccontextmanager
async def status_polled(client: BenchClient, period: float, rtts: list[float]) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(poll_status(client, period, rtts, stop))
    try:
        yield
    finally:
        stop.set()
        await task


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    calls = QUICK_CALLS if quick else FULL_CALLS
    scale = Section("scale", f"arena/status round trips ({calls}, one every 20 ms) by manifest size")
    for name, jobs in manifests().items():
        if quick and name == "500_jobs":
            continue
        first, rtts, size = asyncio.run(_status_round(jobs, calls))
        target = "<= 5" if name == "realistic" else None
        scale.figure(f"{name}.first_ms", "ms").add(first)
        scale.figure(f"{name}.p50_ms", "ms").add(harness.percentile(rtts, 50))
        scale.figure(f"{name}.p99_ms", "ms", target).add(harness.percentile(rtts, 99))
        scale.figure(f"{name}.answer_kb", "KB").add(size / 1024)
    scale.facts["load_average"] = harness.machine()["load_average"]
    runs = QUICK_RUNS if quick else FULL_RUNS
    history = Section("history", f"arena/status and arena/runs with {runs:,} finished runs")
    jobs = generated_jobs(250, 250) if not quick else generated_jobs(10, 10)
    asyncio.run(_history_round(jobs, runs, calls, history))
    history.facts["load_average"] = harness.machine()["load_average"]
    count = QUICK_CHECKPOINTS if quick else FULL_CHECKPOINTS
    checkpoints = Section("checkpoints", f"arena/metrics of a run that announced {count:,} checkpoints")
    asyncio.run(_checkpoints_round(count, checkpoints))
    checkpoints.facts["load_average"] = harness.machine()["load_average"]
    return [scale, history, checkpoints]


async def _status_calls(client: BenchClient, calls: int) -> list[float]:
    rtts: list[float] = []
    next_call = time.perf_counter()
    for _ in range(calls):
        sent = time.perf_counter()
        await client.call("arena/status", {})
        rtts.append((time.perf_counter() - sent) * 1000.0)
        next_call += PERIOD
        await asyncio.sleep(max(0.0, next_call - time.perf_counter()))
    return rtts


async def _status_round(jobs: list[dict[str, Any]], calls: int) -> tuple[float, list[float], int]:
    """(first status ms, later round trips ms, answer bytes)."""
    with harness.workspace(jobs) as root:
        prepare(root)
        async with arena.session(root) as client:
            sent = time.perf_counter()
            answer = await client.call("arena/status", {})
            first = (time.perf_counter() - sent) * 1000.0
            if len(answer["jobs"]) != len(jobs):
                raise RuntimeError(f"arena/status listed {len(answer['jobs'])} jobs of {len(jobs)}")
            rtts = await _status_calls(client, calls)
            return first, rtts, len(json.dumps(answer))


async def _finished_run(client: BenchClient, job_id: str) -> dict[str, Any]:
    _, final = await arena.run_to_end(client, job_id)
    return final


async def _history_round(jobs: list[dict[str, Any]], runs: int, calls: int, section: Section) -> None:
    with harness.workspace([*jobs, harness.task_job("quick", "sleeper.py", "0")]) as root:
        prepare(root)
        async with arena.session(root) as client:
            final = await _finished_run(client, "quick")
        template = Path(final["logPath"]).parent
        clone_runs(root, template, runs)
        async with arena.session(root) as client:
            sent = time.perf_counter()
            answer = await client.call("arena/status", {})
            section.figure("first_status_ms", "ms").add((time.perf_counter() - sent) * 1000.0)
            section.figure("status_answer_kb", "KB").add(len(json.dumps(answer)) / 1024)
            rtts = await _status_calls(client, calls)
            section.figure("status.p50_ms", "ms").add(harness.percentile(rtts, 50))
            section.figure("status.p99_ms", "ms", "<= 20").add(harness.percentile(rtts, 99))
            seen, pages, walk = await _walk_runs(client)
            section.figure("runs_listed", "runs").add(seen)
            section.figure("runs_pages", "pages").add(pages)
            section.figure("runs_walk_s", "s").add(walk)
            rss = harness.rss_mb(client.pid)
            if rss is not None:
                section.figure("server_rss_mb", "MB", "<= 120").add(rss)
        section.facts["runs"] = runs + 1


async def _walk_runs(client: BenchClient) -> tuple[int, int, float]:
    """(runs seen, pages, seconds) of ``arena/runs`` from the newest to the oldest (0 pages: none)."""
    started = time.perf_counter()
    seen: set[str] = set()
    pages = 0
    before = None
    while True:
        try:
            page = await client.call("arena/runs", {"before": before, "limit": 500})
        except Exception:  # an arena-ls without arena/runs (a "before" product)
            return 0, 0, 0.0
        pages += 1
        seen.update(run["runId"] for run in page["runs"])
        before = page.get("next")
        if not before:
            return len(seen), pages, time.perf_counter() - started


async def _checkpoints_round(count: int, section: Section) -> None:
    job = harness.task_job("ckpts", "checkpoints.py", str(count))
    with harness.workspace([job]) as root:
        async with arena.session(root) as client:
            elapsed, final = await arena.run_to_end(client, "ckpts")
            section.figure("run_s", "s").add(elapsed)
            before = harness.rss_mb(client.pid)
            started = time.perf_counter()
            _points, checkpoints, pages, largest = await _walk_metrics(client, final["runId"])
            section.figure("metrics_walk_s", "s").add(time.perf_counter() - started)
            section.figure("checkpoints_read", "n").add(checkpoints)
            section.figure("metrics_pages", "pages").add(pages)
            section.figure("largest_page_kb", "KB").add(largest / 1024)
            after = harness.rss_mb(client.pid)
            if before is not None and after is not None:
                section.figure("server_rss_before_mb", "MB").add(before)
                section.figure("server_rss_mb", "MB", "<= 120").add(after)
        section.facts["checkpoints"] = count


async def _walk_metrics(client: BenchClient, run_id: str) -> tuple[int, int, int, int]:
    """(points, checkpoints, pages, largest answer bytes) of ``arena/metrics`` paged to its end."""
    points = checkpoints = pages = largest = 0
    cursor = None
    while True:
        page = await client.call("arena/metrics", {"runId": run_id, "cursor": cursor}, timeout=600.0)
        pages += 1
        largest = max(largest, len(json.dumps(page)))
        points += len(page["points"])
        checkpoints += len(page["checkpoints"])
        cursor = page.get("next")
        if not cursor:
            return points, checkpoints, pages, largest
