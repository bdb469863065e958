"""The one map from insight kinds to rules; the engine and the docs both read it."""

from __future__ import annotations

from types import MappingProxyType

from arena_ls.insights.rules import (
    checkpoint_overdue,
    disk_runway,
    edited_during_run,
    gpu_bubble,
    grad_health,
    loss_spike,
    low_ram,
    thermal,
    vram_spill,
)
from arena_ls.insights.rules.base import InsightRule

_MODULES = (
    loss_spike,
    grad_health,
    gpu_bubble,
    vram_spill,
    checkpoint_overdue,
    thermal,
    edited_during_run,
    low_ram,
    disk_runway,
)

INSIGHTS: MappingProxyType[str, InsightRule] = MappingProxyType(
    {module.RULE.kind: module.RULE for module in _MODULES}
)
"""Every insight rule by kind, in the contract's order (6.3)."""
