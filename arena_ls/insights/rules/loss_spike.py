"""loss-spike: the loss jumped far above its recent robust spread.

What it watches
---------------
Each announced (finite) loss against the `lossSpikeWindow` (20) losses
before it: their median m and their median absolute deviation (MAD). A
loss is a spike when it is above m + `lossSpikeMads` (8) x 1.4826 x MAD
*and* at least `lossSpikeMinJump` (25%) above m. The median and the MAD
are robust: the steady fall of a healthy loss, the noise of small batches,
and even an earlier spike inside the window barely move them, where a mean
and a standard deviation would be dragged by the very spike they should
reveal. 1.4826 x MAD estimates one standard deviation of normal noise; 8 of
them is far outside the noise of a healthy run (the reference trainer's
600-step run never comes near it, see `tests/insights/test_rules.py`), and
the 25% floor keeps a nearly flat loss (whose MAD is almost zero) from
firing on rounding. It needs at least half a window of points first, and it
stays shown for `lossSpikeHoldSeconds` (30 s) and until the last 5 points
are back in range.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A night of training on a small card is a few thousand steps. A spike is
often the start of a divergence (a learning rate too high for the batch the
card can hold, a bad batch, a numerical blow-up): noticed at once, it costs
a restart from the last good checkpoint; noticed in the morning, the night.

What to do
----------
Look at the loss plot (`arena plot`). If the loss does not come back down
within a few hundred steps, stop the run and resume from the checkpoint
before the spike with a lower learning rate or stronger gradient clipping;
check the data around that step for a corrupt batch. Or let arena-ls do it:
with `lossSpikeAction` `rollback` the agent stops the run cooperatively and
resumes it from the newest verified checkpoint at least `rollbackStepsBefore`
(100) steps before the spike, with `{skip}` in `resume.args` set to
`rollbackSkipBatches` (200), at most `rollbackMax` (3) times a run, and never
without such a checkpoint (PaLM's remedy; contract 8.2). Each rollback is an
`arena` line, a `rollbacks` entry of `arena/metrics` and a mark on `arena plot`.
The rollback is tested end to end in `tests/reliability/test_loss_spike_rollback.py`
(a spike at step 60 rolls back to step 40 with 50 batches skipped; a spike every
launch stops at `rollbackMax`), its policy in `tests/unit/test_rollback_policy.py`.
"""

from __future__ import annotations

from arena_ls.agent import rollback
from arena_ls.insights.model import LossPoint, Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "loss-spike"
CLEAR_POINTS = 5


def spike_over(window: list[float], loss: float, settings: InsightSettings) -> float | None:
    """The baseline median when ``loss`` is a spike over ``window``, else None (the one test of a
    spike, ``agent.rollback.spike_over``, which the agent's loss-spike rollback uses too)."""
    return rollback.spike_over(
        window,
        loss,
        size=settings.loss_spike_window,
        mads=settings.loss_spike_mads,
        min_jump=settings.loss_spike_min_jump,
    )


def latest_spike(
    losses: list[LossPoint], settings: InsightSettings, since: float
) -> tuple[LossPoint, float] | None:
    """The last spike among the final ``CLEAR_POINTS`` points or those after ``since``."""
    size = settings.loss_spike_window
    first = len(losses) - CLEAR_POINTS
    while first > 0 and losses[first - 1].at >= since:
        first -= 1
    for index in range(len(losses) - 1, max(first, 0) - 1, -1):
        window = [p.loss for p in losses[max(0, index - size) : index]]
        middle = spike_over(window, losses[index].loss, settings)
        if middle is not None:
            return losses[index], middle
    return None


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    found = latest_spike(list(obs.losses), settings, now - settings.loss_spike_hold_seconds)
    if found is None:
        return None
    point, middle = found
    return (
        f"loss spiked to {point.loss:.4g} at step {point.step} (recent median {middle:.4g}): "
        "if it does not come back down, stop and resume from the checkpoint before it "
        "with a lower learning rate"
    )


RULE = InsightRule(
    kind=KIND,
    severity="warning",
    doc=parse_doc(__doc__),
    check=check,
    settings=(
        "lossSpikeWindow",
        "lossSpikeMads",
        "lossSpikeMinJump",
        "lossSpikeHoldSeconds",
        "lossSpikeAction",
        "rollbackStepsBefore",
        "rollbackSkipBatches",
        "rollbackMax",
    ),
)
