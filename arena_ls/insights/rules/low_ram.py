"""low-ram: the machine's free RAM fell below the pre-flight floor while the run goes on.

What it watches
---------------
The RAM available to a new process (psutil's `available`) at the latest
health sample, against the floor a start's pre-flight asks for
(`preflight.minFreeRamMb`, 5120 MB by default). It clears when the RAM is
back above the floor.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A 16 GB laptop has little to spare: each model server takes 1 to 2 GB. Below
the floor the trainer's host memory is swapped out (every step slows down)
or the kernel's OOM killer ends it. The start was safe; the machine changed
since.

What to do
----------
Close what took the memory (another model server, a second job, a browser):
the run goes on meanwhile. The watchdog does not relaunch a crashed run
until the RAM is back above the floor.
"""

from __future__ import annotations

from arena_ls.insights.model import Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "low-ram"


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    available, floor = obs.ram_available_mb, obs.ram_floor_mb
    if available is None or available >= floor:
        return None
    return (
        f"{available} MB of RAM available, below the pre-flight floor of {floor} MB "
        "(preflight.minFreeRamMb): the trainer may swap or be killed; close other programs"
    )


RULE = InsightRule(kind=KIND, severity="warning", doc=parse_doc(__doc__), check=check)
