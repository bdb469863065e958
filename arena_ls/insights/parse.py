"""The trainer's health line, as the insights read it (its grammar: ``lifecycle.health_line``)."""

from __future__ import annotations

from arena_ls.lifecycle.health_line import MARK, PREFIX, HealthPoint, health_in_chunk, parse_health

__all__ = ["MARK", "PREFIX", "HealthPoint", "health_in_chunk", "parse_health"]
