"""Stop latency: a cooperative stop and a kill of a 50-process tree, arena-ls against supervisord.

- Cooperative: the trainer polls ``ARENA_STOP_FILE`` every 100 ms (SIGTERM
  only sets the flag its loop checks). arena-ls: the ``arena/stop`` round
  trip, which answers once the run is ``stopped``. supervisord:
  ``stopProcess(name, False)`` and ``getProcessInfo`` polled every 5 ms
  until STOPPED.
- Kill-tree: the trainer forks a tree of 50 processes that all ignore
  SIGTERM. arena-ls: ``arena/stop`` with ``kill: true``; supervisord:
  ``stopasgroup``/``killasgroup`` with ``stopwaitsecs=0``. Both are timed
  until every one of the 50 pids is dead (zombies allowed) and until every
  one is gone, reaped too (polled every 2 ms with psutil); what is left
  after a second is reported, and whether the agent itself is left as a
  zombie of the server.

The CPU the server and the agent spend during each arena-ls stop is
measured too: the stop should be waiting, not working.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from typing import Any

from benchmarks import arena, harness
from benchmarks.client import BenchClient
from benchmarks.harness import Section
from benchmarks.supervisord_runner import Program, Supervisord, running

TREE_SIZE = 50
GONE_POLL = 0.002
STOP_POLL = 0.005


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 5)
    section = Section("stop", "stop latency: cooperative stop and kill of a 50-process tree")
    section.facts["repeats"] = repeats
    with harness.scratch() as folder:
        programs = [
            Program("coop", [sys.executable, harness.trainer("cooperative.py")], stopwaitsecs=10),
            Program(
                "tree",
                [sys.executable, harness.trainer("tree.py"), str(TREE_SIZE)],
                stopasgroup=True,
                killasgroup=True,
                stopwaitsecs=0,
            ),
        ]
        with running(folder, programs) as daemon:
            for _ in range(repeats):
                asyncio.run(_arena_round(section))
                _supervisord_round(section, daemon)
    coop = section.figures["arena.cooperative_s"]
    reference = section.figures["supervisord.cooperative_s"]
    gap = section.figure("cooperative_gap_ms", "ms", "<= 60")
    gap.samples = [(a - b) * 1000.0 for a, b in zip(coop.samples, reference.samples, strict=False)]
    return [section]


# --------------------------------------------------------------------------- arena-ls


async def _arena_round(section: Section) -> None:
    jobs = [
        harness.task_job("coop", "cooperative.py"),
        harness.task_job("tree", "tree.py", str(TREE_SIZE)),
    ]
    with harness.workspace(jobs) as root:
        async with arena.session(root) as client:
            await _arena_cooperative(section, client)
            await _arena_kill_tree(section, client)


async def _arena_cooperative(section: Section, client: BenchClient) -> None:
    _, info = await arena.start(client, "coop")
    await arena.wait_line(client, info["runId"], "ready")
    result, wall, cpu = await _timed_stop(client, info, {"id": "coop"})
    if result.get("status") != "stopped":
        raise RuntimeError(f"the cooperative stop ended {result.get('status')}")
    section.figure("arena.cooperative_s", "s").add(wall)
    section.figure("arena.cooperative.server_cpu_s", "s").add(cpu["server"])
    section.figure("arena.cooperative.agent_cpu_s", "s").add(cpu["agent"])


async def _arena_kill_tree(section: Section, client: BenchClient) -> None:
    _, info = await arena.start(client, "tree")
    ready = await arena.wait_line(client, info["runId"], "tree ready")
    pids = [int(p) for p in ready.split()[3:]]
    if len(pids) != TREE_SIZE:
        raise RuntimeError(f"the tree has {len(pids)} processes, not {TREE_SIZE}")
    started = time.perf_counter()
    watcher = asyncio.ensure_future(_wait_all_gone(pids, started))  # alongside the stop request
    result, answered, cpu = await _timed_stop(client, info, {"id": "tree", "kill": True})
    dead_at, gone_at = await watcher
    if result.get("status") != "stopped":
        raise RuntimeError(f"the kill ended {result.get('status')}")
    section.figure("arena.kill_tree_all_dead_s", "s").add(dead_at)
    section.figure("arena.kill_tree_all_gone_s", "s", "<= 0.5").add(gone_at)
    section.figure("arena.kill_tree_stop_answer_s", "s").add(answered)
    section.figure("arena.kill_tree.server_cpu_s", "s").add(cpu["server"])
    section.figure("arena.kill_tree.agent_cpu_s", "s").add(cpu["agent"])
    await asyncio.sleep(1.0)
    section.figure("arena.kill_tree_left_after_1s", "procs", "<= 0").add(
        sum(not harness.pid_gone(pid) for pid in pids)
    )
    section.figure("arena.agent_zombie_after_1s", "procs", "<= 0").add(
        len(harness.zombies_among([info["agentPid"]]))
    )


async def _timed_stop(
    client: BenchClient, info: dict[str, Any], params: dict[str, Any]
) -> tuple[dict[str, Any], float, dict[str, float]]:
    """``arena/stop`` (waiting for the end): (result, seconds, CPU seconds of server and agent)."""
    watches = {"server": harness.CpuWatch(client.pid), "agent": harness.CpuWatch(info["agentPid"])}
    started = time.perf_counter()
    result = await client.call("arena/stop", {**params, "confirm": True})
    wall = time.perf_counter() - started
    cpu = {name: watch.finish() or 0.0 for name, watch in watches.items()}
    return result, wall, cpu


async def _wait_all_gone(pids: list[int], started: float, timeout: float = 30.0) -> tuple[float, float]:
    """Seconds from ``started`` until every pid is dead (a zombie at most), and until all are reaped.

    Orphans are reaped by whoever adopts them: init, or a subreaper. How
    soon init does it depends on the machine (the sandbox these figures
    come from has an init that reaps about every two seconds), hence both.
    """
    deadline = time.monotonic() + timeout
    left = list(pids)
    dead_at = math.inf
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if not harness.pid_gone(pid)]
        if dead_at == math.inf and len(harness.zombies_among(left)) == len(left):
            dead_at = time.perf_counter() - started
        if left:
            await asyncio.sleep(GONE_POLL)
    return dead_at, (time.perf_counter() - started if not left else math.inf)


# --------------------------------------------------------------------------- supervisord


def _supervisord_round(section: Section, daemon: Supervisord) -> None:
    daemon.start_program("coop")
    _wait_log(daemon, "coop", "ready")
    started = time.perf_counter()
    daemon.stop_program("coop")
    stopped, _ = daemon.wait_state("coop", {"STOPPED", "EXITED"}, poll=STOP_POLL)
    section.figure("supervisord.cooperative_s", "s").add(stopped - started)

    daemon.start_program("tree")
    ready = _wait_log(daemon, "tree", "tree ready")
    pids = [int(p) for p in ready.split()[3:]]
    started = time.perf_counter()
    daemon.stop_program("tree")
    dead, gone = asyncio.run(_wait_all_gone(pids, started))
    daemon.wait_state("tree", {"STOPPED", "EXITED"}, poll=STOP_POLL)
    section.figure("supervisord.kill_tree_all_dead_s", "s").add(dead)
    section.figure("supervisord.kill_tree_all_gone_s", "s").add(gone)
    time.sleep(1.0)
    section.figure("supervisord.kill_tree_left_after_1s", "procs").add(
        sum(not harness.pid_gone(pid) for pid in pids)
    )


def _wait_log(daemon: Supervisord, name: str, text: str, timeout: float = 60.0) -> str:
    path = daemon.programs[name].log_path(daemon.folder)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            for line in path.read_text().splitlines():
                if text in line:
                    return line
        time.sleep(0.01)
    raise TimeoutError(f"supervisord program {name} never printed {text!r}")
