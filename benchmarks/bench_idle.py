"""Idle cost: CPU seconds the server and the agent use while a run's trainer only sleeps.

The run is started, left to settle for two seconds, and then measured for 60
seconds (3 in quick mode): psutil's user + system CPU of the server process
and of the run's agent. supervisord is measured over the same window with
the same sleeper, as a reference.
"""

from __future__ import annotations

import asyncio
import sys

from benchmarks import arena, harness
from benchmarks.harness import Section
from benchmarks.supervisord_runner import Program, Supervisord, running

SETTLE_SECONDS = 2.0
QUICK_SETTLE_SECONDS = 0.5


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    seconds = 3.0 if quick else 60.0
    settle = QUICK_SETTLE_SECONDS if quick else SETTLE_SECONDS
    repeats = repeats or 1
    section = Section("idle", f"CPU seconds over {seconds:.0f} s of an idle run (trainer sleeping)")
    section.facts.update({"seconds": seconds, "repeats": repeats})
    with harness.scratch() as folder:
        program = Program("sleeper", [sys.executable, harness.trainer("sleeper.py"), "3600"])
        with running(folder, [program]) as daemon:
            for _ in range(repeats):
                asyncio.run(_round(section, daemon, seconds, settle))
    return [section]


async def _round(section: Section, daemon: Supervisord, seconds: float, settle: float) -> None:
    job = harness.task_job("sleeper", "sleeper.py", "3600")
    with harness.workspace([job]) as root:
        async with arena.session(root) as client:
            _, info = await arena.start(client, "sleeper")
            daemon.start_program("sleeper")
            daemon.wait_state("sleeper", {"RUNNING"})
            await asyncio.sleep(settle)
            watched = (("server", client.pid), ("agent", info["agentPid"]), ("supervisord", daemon.pid))
            before = {name: harness.cpu_seconds(pid) for name, pid in watched}
            await asyncio.sleep(seconds)
            for name, pid in watched:
                now, then = harness.cpu_seconds(pid), before[name]
                if now is None or then is None:
                    raise RuntimeError(f"the {name} process went away during the idle measurement")
                target = "< 0.5" if name != "supervisord" else None
                section.figure(f"{name}_cpu_s", "s", target).add(now - then)
            await client.call("arena/stop", {"id": "sleeper", "kill": True, "confirm": True})
            daemon.stop_program("sleeper")
            daemon.wait_state("sleeper", {"STOPPED", "EXITED"})
