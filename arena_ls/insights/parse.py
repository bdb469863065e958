"""The trainer's health line: ``@arena {"event": "health", "gradNorm": G, ...}``.

The lifecycle's event parser knows progress and checkpoints; health lines
are read here, by the insights and by ``arena/metrics``. An optional
``step`` ties a line to a progress point.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from arena_ls.insights.model import HealthPoint
from arena_ls.validation import finite

PREFIX = b"@arena "
MARK = b'"health"'


def parse_health(text: str, at: float) -> HealthPoint | None:
    """One line as a health point, or None when it is not a valid health line."""
    if not text.startswith("@arena "):
        return None
    try:
        payload = json.loads(text[7:])
    except (ValueError, RecursionError):
        return None
    if not isinstance(payload, dict) or payload.get("event") != "health":
        return None
    point = HealthPoint(
        at=at,
        grad_norm=finite(payload.get("gradNorm")),
        clip_fraction=finite(payload.get("clipFraction")),
        grad_param_ratio=finite(payload.get("gradParamRatio")),
        step=_step(payload.get("step")),
    )
    if point.grad_norm is None and point.clip_fraction is None and point.grad_param_ratio is None:
        return None
    return point


def _step(value: Any) -> int | None:
    number = finite(value)
    return int(number) if number is not None and number >= 0 else None


def health_in_chunk(data: bytes, at: float) -> Iterator[HealthPoint]:
    """Health points in a chunk of complete lines (cheap when it has none)."""
    if MARK not in data or PREFIX not in data:
        return
    for raw in data.splitlines():
        if raw.startswith(PREFIX) and MARK in raw:
            point = parse_health(raw.decode("utf-8", "replace"), at)
            if point is not None:
                yield point
