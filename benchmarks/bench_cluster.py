"""A job on a Ray cluster: arena-ls against Ray's own CLI, side by side on one local Ray head.

Opt-in (``python -m benchmarks --only cluster``; it starts a Ray head, about
20 s on two loaded cores, and needs ``arena-ls[ray]``). Each round runs the
same job (``trainers/cluster_ticker.py``: ``ready``, then a ``tick SEQ
STAMP`` line every 100 ms until SIGTERM) both ways:

- arena-ls: ``arena/start`` of a ``runOn`` job → the ``running``
  ``arena/statusChanged``; → the first ``arena/log`` with ``ready``; the
  latency of each tick written after the first line arrived (its arrival
  in an ``arena/log`` minus the trainer's ``perf_counter`` stamp: one
  machine, one monotonic clock);
  ``arena/stop`` → its answer (``stopped``).
- Ray's CLI: ``ray job submit --no-wait`` → RUNNING (its status polled
  over REST every 20 ms, so the CLI's own start-up is not counted twice);
  → the first ``ready`` on the stdout of ``ray job logs -f`` started right
  after the submit returned; the latency through that tail of each tick
  written after its first line (Ray's own tail: the anchor, about 1 s); ``ray job stop`` → its return
  (it waits for STOPPED).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import arena, harness
from benchmarks.harness import Section
from tests.helpers import rayhead

TICK_INTERVAL = "0.1"
TICKS_MEASURED = 20
STATUS_POLL = 0.02
CLUSTER = "bench"


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 3)
    section = Section("cluster", "a job on a local Ray head: arena-ls against Ray's own CLI")
    section.facts["repeats"] = repeats
    if not rayhead.ray_installed() or sys.platform == "win32":
        section.facts["skipped"] = "needs arena-ls[ray] on POSIX (the head is ended by process group)"
        return [section]
    with rayhead.ray_head() as head:
        for round_ in range(repeats):
            asyncio.run(_arena_round(section, head))
            _ray_cli_round(section, head, f"bench-cli-{round_}-{time.time_ns()}")
    for what in ("submit_to_running_s", "first_line_s", "line_latency_ms", "stop_s"):
        mine, theirs = section.figures[f"arena.{what}"], section.figures[f"ray_cli.{what}"]
        section.ratio(f"arena_over_ray_cli.{what}", mine, theirs)
    return [section]


# --------------------------------------------------------------------------- arena-ls


def _job() -> dict[str, Any]:
    return {
        "id": "ticker", "kind": "task", "command": "{python}", "status": "ready", "runOn": CLUSTER,
        "args": ["trainers/cluster_ticker.py", TICK_INTERVAL],
        "stop": {"method": "signal", "graceSeconds": 10},
    }  # fmt: skip


async def _arena_round(section: Section, head: rayhead.RayHead) -> None:
    with harness.workspace([_job()]) as root:
        manifest = root / "training" / "manifest.json"
        manifest.write_text(
            manifest.read_text().replace('"jobs"', f'"clusters": {{"{CLUSTER}": {{}}}}, "jobs"', 1)
        )
        options = {"clusters": {CLUSTER: {"address": head.address, "tokenFile": str(head.token_file),
                                          "python": sys.executable}}}  # fmt: skip
        client = await _session(root, options)
        try:
            await _arena_measure(section, client)
        finally:
            await client.close()


async def _session(root: Path, options: dict[str, Any]) -> Any:
    from benchmarks.client import open_session

    return await open_session(root, root / "arena-ls.stderr", options=options)


async def _arena_measure(section: Section, client: Any) -> None:
    running = client.status_future(lambda p: p.get("jobId") == "ticker" and p.get("status") == "running")
    sent, info = await arena.start(client, "ticker")
    run_id = info["runId"]
    running_at = await asyncio.wait_for(running, 120)
    section.figure("arena.submit_to_running_s", "s").add(running_at - sent)
    first = await _wait_batches(client, run_id, lambda text: text == "ready")
    section.figure("arena.first_line_s", "s").add(first - sent)
    latencies = await _tick_latencies(client, run_id, after=first)
    for value in latencies:
        section.figure("arena.line_latency_ms", "ms").add(value)
    started = time.perf_counter()
    result = await client.call("arena/stop", {"runId": run_id, "confirm": True})
    if result.get("status") != "stopped":
        raise RuntimeError(f"the arena stop ended {result.get('status')}")
    section.figure("arena.stop_s", "s").add(time.perf_counter() - started)


async def _wait_batches(client: Any, run_id: str, match: Any, timeout: float = 120.0) -> float:
    """The arrival of the first ``arena/log`` batch of ``run_id`` holding a line that ``match``es."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for arrived, params in client.log_batches:
            if params.get("runId") == run_id and any(match(line["text"]) for line in params["lines"]):
                return float(arrived)
        await asyncio.sleep(0.01)
    raise TimeoutError(f"run {run_id}: no matching line")


async def _tick_latencies(client: Any, run_id: str, after: float, timeout: float = 120.0) -> list[float]:
    """Latencies of the ticks written once lines were flowing (``after``: the first line's arrival)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        latencies = [
            (arrived - stamp) * 1000.0
            for arrived, params in client.log_batches
            if params.get("runId") == run_id
            for line in params["lines"]
            if line["text"].startswith("tick ") and (stamp := float(line["text"].split()[2])) > after
        ]
        if len(latencies) >= TICKS_MEASURED:
            return latencies[:TICKS_MEASURED]
        await asyncio.sleep(0.05)
    raise TimeoutError(f"run {run_id}: fewer than {TICKS_MEASURED} ticks")


# --------------------------------------------------------------------------- Ray's CLI


def _ray_cli_round(section: Section, head: rayhead.RayHead, sid: str) -> None:
    with harness.workspace([]) as root:
        ticker = [sys.executable, "trainers/cluster_ticker.py", TICK_INTERVAL]
        submit = [rayhead.ray_binary(), "job", "submit", "--no-wait", "--submission-id", sid,
                  "--working-dir", str(root), "--", *ticker]  # fmt: skip
        sent = time.perf_counter()
        subprocess.run(submit, env=head.env, check=True, capture_output=True, timeout=120)
        tail = _Tail([rayhead.ray_binary(), "job", "logs", "-f", sid], head.env)
        while head.request("GET", f"/api/jobs/{sid}")["status"] != "RUNNING":
            time.sleep(STATUS_POLL)
        section.figure("ray_cli.submit_to_running_s", "s").add(time.perf_counter() - sent)
        first = tail.wait(lambda text: text == "ready")
        section.figure("ray_cli.first_line_s", "s").add(first - sent)
        for value in tail.latencies(TICKS_MEASURED, after=first):
            section.figure("ray_cli.line_latency_ms", "ms").add(value)
        started = time.perf_counter()
        subprocess.run([rayhead.ray_binary(), "job", "stop", sid], env=head.env, check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        section.figure("ray_cli.stop_s", "s").add(time.perf_counter() - started)
        tail.close()


class _Tail:
    """``ray job logs -f``, each stdout line timestamped on arrival (a thread reads it)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: list[tuple[float, str]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.append((time.perf_counter(), raw.decode("utf-8", "replace").rstrip("\n")))

    def wait(self, match: Any, timeout: float = 120.0) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for arrived, text in list(self.lines):
                if match(text):
                    return arrived
            time.sleep(0.01)
        raise TimeoutError("Ray's tail never showed the line")

    def latencies(self, count: int, after: float, timeout: float = 120.0) -> list[float]:
        """Latencies of the ticks written once the tail was showing lines (a backlog is not latency)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            stamped = [
                (arrived, float(text.split()[2]))
                for arrived, text in list(self.lines)
                if text.startswith("tick ")
            ]
            ticks = [(arrived - stamp) * 1000.0 for arrived, stamp in stamped if stamp > after]
            if len(ticks) >= count:
                return ticks[:count]
            time.sleep(0.05)
        raise TimeoutError("Ray's tail showed too few ticks")

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
