"""Is a run's last checkpoint too old to stop or kill it without asking? (contract 7.3, the SOP's rule 4)

"Never kill a job without checkpoint safety: the latest checkpoint verified
recent before the stop." A run whose last checkpoint is older than twice
its own cadence (the interval between its last two announced checkpoints, in
time and, where the step is known, in steps too), or than 30 minutes when it
has announced only one, has that much work to
lose: a stop or kill of it asks first (refusal 1007 with ``lastCheckpoint``
and ``lost``). A pure function of the clock and what the run announced.

``lost_since_checkpoint`` is this refusal's own ``lost`` (``{steps,
seconds}`` of work after the checkpoint); the stop result's ``lost``
(contract 7.1) is computed in ``protocol/wire.py``.
"""

from __future__ import annotations

from collections.abc import MutableSequence, Sequence
from typing import Any

from arena_ls.timeutil import iso_utc

NO_CADENCE_SECONDS = 1800.0
"""How old a run's only checkpoint may be before a stop asks (30 minutes)."""
CADENCE_FACTOR = 2.0


def note_checkpoint(recent: MutableSequence[tuple[int, float]], step: int, at: float) -> None:
    """Adds an announced checkpoint to ``recent`` unless it is the last one announced again.

    A trainer may announce one save twice (a plain "saved checkpoint step=50" line and an
    ``@arena`` checkpoint event, as the reference trainer does): counted twice, the cadence
    would be the milliseconds between the two lines and every stop would ask.
    """
    if recent and recent[-1][0] == step:
        return
    recent.append((step, at))


def checkpoint_cadence(checkpoints: Sequence[tuple[int, float]]) -> float | None:
    """Seconds between the last two announced checkpoints ``(step, at)``; None with fewer than two.

    Two announcements of the same step are one checkpoint (``note_checkpoint``): no cadence.
    """
    if len(checkpoints) < 2 or checkpoints[-1][0] == checkpoints[-2][0]:
        return None
    return max(0.0, checkpoints[-1][1] - checkpoints[-2][1])


def too_old(now: float, checkpoints: Sequence[tuple[int, float]], step: int | None = None) -> bool:
    """True when the last checkpoint is older than twice the cadence (30 min without one).

    With a cadence, "older" must hold in time and, where the run's ``step`` is
    known, in steps too: a trainer slowed by a busy machine (its steps late, its
    saves not missed) is not asked about; one that went past two of its own
    checkpoint intervals without saving is (its save failed, or stopped)."""
    if not checkpoints:
        return False
    cadence = checkpoint_cadence(checkpoints)
    if cadence is None:
        return now - checkpoints[-1][1] > NO_CADENCE_SECONDS
    late = now - checkpoints[-1][1] > CADENCE_FACTOR * cadence
    interval = checkpoints[-1][0] - checkpoints[-2][0]
    if step is None or interval <= 0:
        return late
    return late and step - checkpoints[-1][0] > CADENCE_FACTOR * interval


def lost_since_checkpoint(now: float, checkpoint: tuple[int, float], step: int | None) -> dict[str, Any]:
    """``{steps, seconds}`` of work after ``checkpoint`` (``steps`` null when no step is known)."""
    checkpoint_step, at = checkpoint
    steps = max(0, step - checkpoint_step) if step is not None else None
    return {"steps": steps, "seconds": round(max(0.0, now - at), 1)}


def stale_checkpoint_refusal(
    now: float, checkpoints: Sequence[tuple[int, float]], path: str | None, step: int | None
) -> dict[str, Any] | None:
    """1007's ``error.data`` (``lastCheckpoint``, ``lost``, ``cadenceSeconds``) when too old, else None."""
    if not too_old(now, checkpoints, step):
        return None
    last_step, at = checkpoints[-1]
    return {
        "lastCheckpoint": {"step": last_step, "path": path, "at": iso_utc(at)},
        "lost": lost_since_checkpoint(now, checkpoints[-1], step),
        "cadenceSeconds": checkpoint_cadence(checkpoints),
    }


def describe(data: dict[str, Any]) -> str:
    """The refusal's message."""
    last, lost = data["lastCheckpoint"], data["lost"]
    cadence = data["cadenceSeconds"]
    rule = f"twice its cadence of {cadence:.0f}s" if cadence is not None else "30 minutes"
    steps = f"{lost['steps']} steps, " if lost["steps"] is not None else ""
    return (
        f"the last checkpoint (step {last['step']}) is {lost['seconds']:.0f}s old, more than {rule}: "
        f"stopping now loses {steps}{lost['seconds']:.0f}s of training; pass confirm: true to stop anyway"
    )
