"""The trainer's health line: ``@arena {"event": "health", "gradNorm": G, ...}``.

The fourth ``@arena`` announcement, beside progress, checkpoint and eval
(``run.trainer_announcements``): its grammar lives here, in the lifecycle, so that the one
reader of a run's records (``records``) parses it with the others. An
optional ``step`` ties a line to a progress point. The insights read the
points (``insights.parse`` re-exports these names), and so does ``arena/metrics``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import attrs

from arena_ls.run.trainer_announcements import BEYOND, MAX_NUMBER, load_bounded_json
from arena_ls.validation import finite


@attrs.frozen
class HealthPoint:
    """One ``@arena {"event": "health", ...}`` line."""

    at: float
    grad_norm: float | None = None
    clip_fraction: float | None = None
    grad_param_ratio: float | None = None
    step: int | None = None


PREFIX = b"@arena "
MARK = b'"health"'


def parse_health(text: str, at: float) -> HealthPoint | None:
    """One line as a health point, or None when it is not a valid health line."""
    if not text.startswith("@arena "):
        return None
    try:
        payload = load_bounded_json(text[7:])
    except (ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(payload, dict) or payload.get("event") != "health":
        return None
    values = [payload.get(key) for key in ("gradNorm", "clipFraction", "gradParamRatio", "step")]
    if any(_beyond_range(value) for value in values):
        return None  # an ordinary line (contract 7.1): no number beyond 10^15 is read
    point = HealthPoint(
        at=at,
        grad_norm=finite(values[0]),
        clip_fraction=finite(values[1]),
        grad_param_ratio=finite(values[2]),
        step=_step(values[3]),
    )
    if point.grad_norm is None and point.clip_fraction is None and point.grad_param_ratio is None:
        return None
    return point


def _beyond_range(value: Any) -> bool:
    """A number a health line may not carry: an integer or float beyond 10^15."""
    if value is BEYOND:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, int):
        return not -MAX_NUMBER <= value <= MAX_NUMBER
    return math.isfinite(value) and abs(value) > MAX_NUMBER


def _step(value: Any) -> int | None:
    number = finite(value)
    return int(number) if number is not None and number >= 0 else None


def health_in_chunk(data: bytes, at: float) -> Iterator[HealthPoint]:
    """Health points in a chunk of complete lines (cheap when it has none: a ``memchr`` for ``@``
    first, which most output has none of, before the two substring searches)."""
    if b"@" not in data or MARK not in data or PREFIX not in data:
        return
    for raw in data.splitlines():
        if raw.startswith(PREFIX) and MARK in raw:
            point = parse_health(raw.decode("utf-8", "replace"), at)
            if point is not None:
                yield point
