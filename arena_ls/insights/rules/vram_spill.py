"""vram-spill: the run's own processes hold more GPU memory than the probe allows.

What it watches
---------------
The GPU memory of the run's own processes (the trainer and its children,
as NVML lists them) at the latest health sample, against the job's
`probe.maxVramMb` (5120 MB by default). It clears when the memory is back
under the limit.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Measured on such a card: past about 5.0 GB of its 6, the driver starts
spilling to shared system memory, and the run goes on about 3x slower
without any error. Nothing crashes; the night just buys a third of the
steps.

What to do
----------
Stop the run (it checkpoints) and resume it with a smaller micro-batch
(gradient accumulation keeps the effective batch), a shorter context or a
smaller evaluation batch; run `arena probe JOB` to check the peak before the
long run.
"""

from __future__ import annotations

from arena_ls.insights.model import Observations
from arena_ls.insights.rules.base import InsightRule, parse_doc
from arena_ls.settings import InsightSettings

KIND = "vram-spill"


def check(obs: Observations, settings: InsightSettings, now: float) -> str | None:
    if not obs.gpu:
        return None
    used = obs.gpu[-1].memory_mb
    if used is None or used <= obs.max_vram_mb:
        return None
    return (
        f"the run holds {used} MB of GPU memory, above the {obs.max_vram_mb} MB limit "
        "(probe.maxVramMb): past it the GPU spills to shared memory and runs about 3x slower; "
        "resume with a smaller micro-batch"
    )


RULE = InsightRule(kind=KIND, severity="warning", doc=parse_doc(__doc__), check=check)
