"""``arena/metrics``: a run's loss and lr history and its checkpoints, from its log.

Read from disk (so it survives server restarts), incrementally (each call
scans only records it has not seen), and bounded: past ``MAX_POINTS`` the
history is halved, keeping the first, last, lowest and highest losses.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from arena_ls.lifecycle.capture import iter_records
from arena_ls.lifecycle.events import Checkpoint, Eval, Progress
from arena_ls.lifecycle.runview import RunView
from arena_ls.timeutil import iso_utc

MAX_POINTS = 10_000


@attrs.define
class MetricsCache:
    next_record: int = 0
    points: list[tuple[int, float | None, float | None, float]] = attrs.field(factory=list)
    checkpoints: list[tuple[int, str, float]] = attrs.field(factory=list)
    evals: list[tuple[int, float | None, float]] = attrs.field(factory=list)


def run_metrics(view: RunView) -> dict[str, Any]:
    cache: MetricsCache = getattr(view, "metrics_cache", None) or MetricsCache()
    view.metrics_cache = cache  # type: ignore[attr-defined]
    for index, stream, _, data, at in iter_records(view.run_dir.path, cache.next_record):
        cache.next_record = index + 1
        if stream == 2:
            continue
        for event in view.parser.parse_chunk(data):
            if isinstance(event, Progress):
                cache.points.append((event.step, event.loss, event.lr, at))
            elif isinstance(event, Checkpoint):
                cache.checkpoints.append((event.step, event.path, at))
            elif isinstance(event, Eval):
                cache.evals.append((event.step, event.loss, at))
        if len(cache.points) > MAX_POINTS:
            cache.points = downsample(cache.points)
    return {
        "runId": view.run_id,
        "points": [
            {"step": s, "loss": _finite(loss), "lr": lr, "at": iso_utc(at)}
            for s, loss, lr, at in cache.points
        ],
        "checkpoints": [{"step": s, "path": p, "at": iso_utc(at)} for s, p, at in cache.checkpoints],
        "evals": [{"step": s, "loss": _finite(loss), "at": iso_utc(at)} for s, loss, at in cache.evals],
    }


def downsample(
    points: list[tuple[int, float | None, float | None, float]],
) -> list[tuple[int, float | None, float | None, float]]:
    """Every other point, plus the first, the last and the extreme losses."""
    keep = set(range(0, len(points), 2)) | {len(points) - 1}
    finite = [
        (loss, i) for i, (_, loss, _, _) in enumerate(points) if loss is not None and math.isfinite(loss)
    ]
    if finite:
        keep |= {min(finite)[1], max(finite)[1]}
    return [points[i] for i in sorted(keep)]


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None
