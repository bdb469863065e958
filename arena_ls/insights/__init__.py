"""Run insights: the health signals an experienced person watches while a run goes on.

Pure policies over observations of one run (progress and health lines,
checkpoint announcements, GPU samples of the run's own processes, the
trainer file's modification time). One module per insight kind under
``rules/``, one registry, one engine that tracks ``since`` and clears an
insight when its condition stops holding. No LSP, no processes here: the
server feeds the observations (``tracker.py``) and puts the result in
``RunInfo.insights`` (contract 6.3).
"""

from __future__ import annotations

from arena_ls.insights.engine import InsightEngine
from arena_ls.insights.model import (
    CheckpointMark,
    GpuSample,
    HealthPoint,
    Insight,
    LossPoint,
    Observations,
)
from arena_ls.insights.registry import INSIGHTS

__all__ = [
    "INSIGHTS",
    "CheckpointMark",
    "GpuSample",
    "HealthPoint",
    "Insight",
    "InsightEngine",
    "LossPoint",
    "Observations",
]
