"""disk-runway: at the rate the run's checkpoints and log grow, their disk fills before the last step.

What it watches
---------------
Every few seconds, what the run has on each disk: the checkpoints it
announced that still exist there (files, or folders such as Hugging Face's
`checkpoint-N`) and its log (the run's folder in the state folder), with
the disk's free space. The rate is the growth from the run's first reading
to its latest (a trainer that saves every five minutes grows in steps; the
whole run evens them out), judged once the readings span at least 10 s. It
holds when, at that rate, the free space runs out before the run reaches its
last step at the current launch's pace (the steps since the launch's first
progress over the time they took); the message says in how long, and how
long the run still has to go. A trainer that overwrites one checkpoint file,
or deletes old ones as it saves new ones, does not grow: nothing is said.
It clears when the rate or the free space changes enough (space freed, old
checkpoints deleted).

The guarantee, and its tests: a run whose checkpoints will fill their disk
before its last step is told so, with both times, within about 15 s of its
start (`tests/lsp/test_disk_runway.py`: a real 48 MB tmpfs mounted by the
test where it runs as root, CI's case; and, anywhere, the free space read
through the injected hardware); a trainer that saves over one file is never
told (the same file); every branch of the rule, pure, in
`tests/insights/test_disk_runway.py`. At the start, the pre-flight's `disk`
check counts the job's checkpoints still to come ([preflight.md](preflight.md#disk)).

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A laptop's one disk holds the system, the datasets and every checkpoint. A
save that fails for lack of space often fails half-way, and leaves a torn
file where the last good checkpoint was; the run may crash hours later, in
the night, at the save that no longer fits.

What to do
----------
Free space on that disk now (old runs' checkpoints, caches), or have the
trainer keep only its last few checkpoints (`save_total_limit` for Hugging
Face, `save_top_k` for Lightning, or deleting the older files after each
save), or save to another disk. The run goes on meanwhile.
"""

from __future__ import annotations

from arena_ls.insights.model import DiskWindow, Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "disk-runway"
MIN_SPAN_SECONDS = 10.0
"""Readings closer than this say nothing of a rate."""
MB = 1024 * 1024


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    to_end = obs.seconds_to_last_step()
    if to_end is None:
        return None
    worst: tuple[float, DiskWindow, float] | None = None
    for window in obs.disks.values():
        rate = growth_rate(window)
        if rate is None:
            continue
        fills_in = window.last.free_bytes / rate
        if fills_in < to_end and (worst is None or fills_in < worst[0]):
            worst = (fills_in, window, rate)
    if worst is None:
        return None
    fills_in, window, rate = worst
    free_mb = window.last.free_bytes / MB
    return (
        f"at the rate {window.label} grow ({rate * 60 / MB:.1f} MB/min), their disk ({free_mb:.0f} MB free) "
        f"fills in about {duration(fills_in)}, before the run's last step (step {obs.total_steps}, in about "
        f"{duration(to_end)}): free space, keep fewer checkpoints, or save to another disk"
    )


def growth_rate(window: DiskWindow) -> float | None:
    """Bytes a second the run's use of the disk grew at, from its first reading to its latest; None
    when the readings are too close or the use did not grow."""
    span = window.last.at - window.first.at
    grown = window.last.used_bytes - window.first.used_bytes
    if span < MIN_SPAN_SECONDS or grown <= 0:
        return None
    return grown / span


def duration(seconds: float) -> str:
    """``45s``, ``12 min``, ``3.5 h``, ``2.0 days``: as a person says a wait."""
    if seconds < 90:
        return f"{max(seconds, 0):.0f}s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


RULE = InsightRule(kind=KIND, severity="warning", doc=parse_doc(__doc__), check=check)
