"""checkpoint-overdue: no checkpoint for twice the cadence the run has shown.

What it watches
---------------
The checkpoint announcements of the current launch. The cadence is the
run's own, as observed: the steps between its last two checkpoints (or, with
one checkpoint, between the launch's first step and it). It holds when the
trainer has announced progress `checkpointOverdueFactor` (2) times that many
steps past its last checkpoint without announcing another; a trainer that
announces no steps is judged the same way in seconds. It clears at the next
checkpoint announcement. We chose the observed interval over the cadence
the gates read from the source (AR005): it is what the trainer really does,
including options passed on the command line, and it needs no parse.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A crash, a sleep of the laptop or a stop loses everything since the last
checkpoint; the watchdog can only resume from one that was announced. A
trainer that silently stopped saving (a full disk caught by a bare
`except`, a save guarded by a condition that no longer holds) looks healthy
until that moment.

What to do
----------
Look at the log around the last checkpoint for a failed save and at the
free space of the checkpoint disk; check the condition around the save in
the trainer. Stop the run cooperatively (it then saves) before fixing it.
"""

from __future__ import annotations

from arena_ls.insights.model import Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "checkpoint-overdue"


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    marks = [m for m in obs.checkpoints if obs.launched_at is None or m.at >= obs.launched_at]
    if not marks:
        return None
    last = marks[-1]
    factor = settings.checkpoint_overdue_factor
    if len(marks) >= 2:
        step_cadence, time_cadence = last.step - marks[-2].step, last.at - marks[-2].at
    else:
        step_cadence = last.step - obs.launch_step
        time_cadence = last.at - (obs.first_progress_at or obs.launched_at or last.at)
    if obs.step is not None and step_cadence > 0:
        behind = obs.step - last.step
        if behind <= factor * step_cadence:
            return None
        late = f"{behind} steps after the last one (step {last.step}; they came every {step_cadence})"
    elif time_cadence > 0 and now - last.at > factor * time_cadence:
        late = f"{now - last.at:.0f} s after the last one (they came every {time_cadence:.0f} s)"
    else:
        return None
    return (
        f"no checkpoint announced {late}: a crash now loses that work; "
        "check the log for a failed save and the disk's free space"
    )


RULE = InsightRule(
    kind=KIND,
    severity="warning",
    doc=parse_doc(__doc__),
    check=check,
    settings=("checkpointOverdueFactor",),
)
