"""gpu-bubble: the GPU mostly waits while the trainer computes (a data-pipeline bubble).

What it watches
---------------
The utilisation of the GPU the run's own processes are on, at each health
sample (every 5 s while a run is active). Once the trainer has been
computing for `gpuBubbleWarmupSeconds` (120 s since the first progress of
the current launch: start-up, data loading and the first compilation are
not bubbles), it holds when at least `gpuBubbleFraction` (80%) of the
samples of the last `gpuBubbleWindowSeconds` (300 s), and at least 3 of
them, are under `gpuBubbleUtilization` (50%). Brief dips (evaluation,
checkpoint saves) stay under the fraction. It clears when the window is
busy again.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Measured on such a card, a healthy compute phase keeps the GPU 95%+ busy;
persistently under 50% means the GPU waits for the Python side (tokenising
on the fly, copying batches one by one, generating evaluation samples one
token at a time). The run is not dead, but it takes twice as long as it
should.

What to do
----------
Pre-tokenise the data once and slice contiguous batches from one tensor,
prefetch the next batch (pinned memory, non-blocking copies), and batch
evaluation and sample generation. `num_workers` stays 0 on this card (see
AR010): fix the pipeline, not the worker count.
"""

from __future__ import annotations

from arena_ls.insights.model import Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "gpu-bubble"
MIN_SAMPLES = 3


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    started = obs.first_progress_at
    if started is None or now - started < settings.gpu_bubble_warmup_seconds:
        return None
    since = max(started, now - settings.gpu_bubble_window_seconds)
    samples = [s.utilization for s in obs.gpu if s.at >= since and s.utilization is not None]
    if len(samples) < MIN_SAMPLES:
        return None
    idle = [u for u in samples if u < settings.gpu_bubble_utilization]
    if len(idle) < settings.gpu_bubble_fraction * len(samples):
        return None
    mean = sum(samples) / len(samples)
    return (
        f"GPU busy only {mean:.0f}% on average while training ({len(idle)} of {len(samples)} "
        f"samples under {settings.gpu_bubble_utilization:.0f}%): the GPU waits for data; "
        "pre-tokenise, slice contiguous batches and prefetch"
    )


RULE = InsightRule(
    kind=KIND,
    severity="warning",
    doc=parse_doc(__doc__),
    check=check,
    settings=(
        "gpuBubbleUtilization",
        "gpuBubbleWindowSeconds",
        "gpuBubbleFraction",
        "gpuBubbleWarmupSeconds",
    ),
)
