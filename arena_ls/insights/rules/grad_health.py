"""grad-health: gradients are clipped too often, or too large for the weights.

What it watches
---------------
The trainer's health lines (`@arena {"event": "health", "gradNorm": G,
"clipFraction": C, "gradParamRatio": R}`) over the last `gradWindow` (10)
of them: it holds when the mean clip fraction (the share of steps whose
gradient norm was cut by clipping) is at least `gradClipFraction` (5%), or
the median ratio of the gradient norm to the parameter norm is at least
`gradParamRatio` (0.1). Lines before step `gradWarmupSteps` (200) are not
judged: in the first steps of training, while the learning rate warms up
and the loss falls fast, gradients are large and clipped by nature (the
reference trainer clips on most of its first 50 steps and on none after
100). It needs 3 health lines first and clears when the window is back
under both.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Clipping now and then is a safety net; clipping on more than one step in
twenty means the optimizer is fighting the learning rate, and every clipped
step is a step of FP32 compute that moved the weights less than it should.
Gradients a tenth the size of the weights are a step away from divergence.
On a card that gives one run a night, both are worth fixing before the run
wastes it.

What to do
----------
Lower the learning rate (or lengthen its warm-up), or raise the batch size
through gradient accumulation so that the gradient is less noisy; check
that the loss is scaled per token, not summed. The plot (`arena plot`) shows
the grad norm and clip fraction beside the loss.
"""

from __future__ import annotations

from statistics import fmean, median

from arena_ls.insights.model import Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "grad-health"
MIN_LINES = 3


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    judged = [h for h in obs.health if h.step is None or h.step >= settings.grad_warmup_steps]
    window = judged[-settings.grad_window :]
    clips = [h.clip_fraction for h in window if h.clip_fraction is not None]
    ratios = [h.grad_param_ratio for h in window if h.grad_param_ratio is not None]
    problems: list[str] = []
    if len(clips) >= MIN_LINES and fmean(clips) >= settings.grad_clip_fraction:
        problems.append(
            f"gradients clipped on {fmean(clips):.0%} of steps (limit {settings.grad_clip_fraction:.0%})"
        )
    if len(ratios) >= MIN_LINES and median(ratios) >= settings.grad_param_ratio:
        problems.append(
            f"gradient/parameter norm ratio {median(ratios):.3g} (limit {settings.grad_param_ratio:g})"
        )
    if not problems:
        return None
    return "; ".join(problems) + ": lower the learning rate or lengthen its warm-up"


RULE = InsightRule(
    kind=KIND,
    severity="warning",
    doc=parse_doc(__doc__),
    check=check,
    settings=("gradWindow", "gradWarmupSteps", "gradClipFraction", "gradParamRatio"),
)
