"""Where the insight service was: it lives in ``insights.service`` (no LSP in it).

Kept for imports made before the move: ``PROBE_SUFFIX`` (now
``lifecycle.probe_id``), which ``protocol/probe.py`` imports from here until
the probe becomes a start variant, and ``InsightService``.
"""

from __future__ import annotations

from arena_ls.insights.service import InsightListener, InsightService
from arena_ls.lifecycle.probe_id import PROBE_SUFFIX

__all__ = ["PROBE_SUFFIX", "InsightListener", "InsightService"]
