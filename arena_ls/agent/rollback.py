"""Loss-spike rollback (contract 8.2): when a spike stops the run, from where it resumes.

Opt-in (setting ``insights.lossSpikeAction`` ``rollback``; ``warn`` only says so). On a loss
spike at step S the agent looks for the newest *verified* checkpoint at step
``S - insights.rollbackStepsBefore`` or earlier (``ckptverify``); only when there is one does it
stop the trainer cooperatively, and then it relaunches it from there with ``resume.args`` whose
``{skip}`` is ``insights.rollbackSkipBatches`` (PaLM's remedy: resume ~100 steps before the spike
and skip 200-500 batches), at most ``insights.rollbackMax`` times a run.

The spike test is the ``loss-spike`` insight's (``spike_over``: the loss far above the robust
spread of the window before it), kept here so the agent, which owns the run while no server
watches, and the insight read a spike the same way. Everything here is pure.
"""

from __future__ import annotations

from collections import deque
from statistics import median

import attrs

from arena_ls.agent.ckptverify import Verification
from arena_ls.run.rundir import CheckpointRecord, RollbackSpec
from arena_ls.settings import Settings

MAD_TO_SIGMA = 1.4826
WARN = "warn"
ROLLBACK = "rollback"


def spike_over(window: list[float], loss: float, *, size: int, mads: float, min_jump: float) -> float | None:
    """The baseline median when ``loss`` is a spike over ``window`` (at least half of ``size``
    points), else None: above the median by ``mads`` robust spreads and by ``min_jump`` of it."""
    if len(window) < max(2, size // 2):
        return None
    middle = median(window)
    spread = MAD_TO_SIGMA * median(abs(value - middle) for value in window)
    floor = abs(middle) * min_jump
    if loss - middle > max(mads * spread, floor):
        return middle
    return None


class SpikeWatch:
    """The losses of the current attempt, each judged against the window before it."""

    def __init__(self, rules: RollbackSpec) -> None:
        self.rules = rules
        self.window: deque[float] = deque(maxlen=max(2, rules.window))

    def observe(self, loss: float | None) -> bool:
        """Whether ``loss`` is a spike (a spike does not join the window: it would widen it)."""
        if loss is None or loss != loss or loss in (float("inf"), float("-inf")):
            return False
        rules = self.rules
        if spike_over(list(self.window), loss, size=rules.window, mads=rules.mads, min_jump=rules.min_jump):
            return True
        self.window.append(loss)
        return False


@attrs.frozen
class Rollback:
    """Roll back: resume from ``target`` (verified), skipping ``skip`` batches; the run's ``number``-th."""

    spike_step: int
    target: CheckpointRecord
    verification: Verification
    skip: int
    number: int
    budget: int


@attrs.frozen
class NoRollback:
    why: str


RollbackDecision = Rollback | NoRollback


def wants_look(rules: RollbackSpec, done: int) -> bool:
    """Whether a spike may lead to a rollback at all (then the agent verifies the candidates)."""
    return rules.action == ROLLBACK and done < rules.max_rollbacks


def bound(rules: RollbackSpec, spike_step: int) -> int:
    """The latest step a rollback may resume from."""
    return spike_step - rules.steps_before


def decide(
    rules: RollbackSpec, spike_step: int, done: int, verification: Verification | None
) -> RollbackDecision:
    """The rollback after a spike at ``spike_step``, with ``done`` rollbacks so far this run and
    the verification of the checkpoints at ``bound`` or before (None: not looked at)."""
    if rules.action != ROLLBACK:
        return NoRollback(f"loss spike at step {spike_step}: insights.lossSpikeAction is {rules.action}")
    if done >= rules.max_rollbacks:
        return NoRollback(
            f"loss spike at step {spike_step}: no rollback, {done} of insights.rollbackMax "
            f"{rules.max_rollbacks} done; the run goes on"
        )
    limit = bound(rules, spike_step)
    if verification is None or verification.chosen is None:
        why = f": {verification.evidence()}" if verification is not None and verification.skipped else ""
        return NoRollback(
            f"loss spike at step {spike_step}: no rollback, no verified checkpoint at step {limit} or "
            f"before ({rules.steps_before} steps before the spike){why}; the run goes on"
        )
    return Rollback(
        spike_step, verification.chosen, verification, rules.skip_batches, done + 1, rules.max_rollbacks
    )


def rollback_spec(settings: Settings) -> RollbackSpec:
    """The loss-spike rollback rules a run keeps from the settings at its start (contract 8.2)."""
    insights = settings.insights
    return RollbackSpec(
        action=insights.loss_spike_action,
        steps_before=insights.rollback_steps_before,
        skip_batches=insights.rollback_skip_batches,
        max_rollbacks=insights.rollback_max,
        window=insights.loss_spike_window,
        mads=insights.loss_spike_mads,
        min_jump=insights.loss_spike_min_jump,
    )
