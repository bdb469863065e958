"""``arena/metrics``: a run's loss, lr and gradient-health history and its checkpoints, from its log.

Read from disk (so it survives server restarts), incrementally (each call
scans only records it has not seen), and bounded: past ``MAX_POINTS`` the
history is halved, keeping the first, last, lowest and highest losses.
The reading runs on a worker thread: a long log is never parsed on the
event loop, so ``arena/metrics`` of a big run does not hold up other requests.
A health line (``@arena {"event": "health", ...}``) gives ``gradNorm`` and
``clipFraction`` to the progress point it follows (null on points without one).
A step announced twice (the reference trainer prints ``step N/600 loss ...``
and then ``@arena {"event": "progress", ...}`` for the same step) is one point,
the later announcement filling in what the earlier one lacked. The agent's own
``restarting from step N`` lines give ``relaunches``: where the watchdog
relaunched the trainer inside the run (``arena plot`` marks exactly those).
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import attrs

from arena_ls.insights.parse import health_in_chunk
from arena_ls.lifecycle.capture import iter_records
from arena_ls.lifecycle.events import Checkpoint, Eval, EventParser, Progress
from arena_ls.lifecycle.outputlog import ARENA
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.watchdog import RESTART_LINE
from arena_ls.timeutil import iso_utc
from arena_ls.validation import finite

MAX_POINTS = 10_000
KEEP_CACHES = 64
"""Runs whose metrics are kept in memory (a workspace keeps its last 50 finished runs); past it
the run asked about least recently is forgotten."""

Point = tuple[int, float | None, float | None, float, float | None, float | None]
"""(step, loss, lr, at, gradNorm, clipFraction)."""


@attrs.define
class MetricsCache:
    parser: EventParser
    """The cache's own: it reads the log from its first record, apart from the live follower."""
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    """Two requests for one run read on two threads, one after the other."""
    next_record: int = 0
    points: list[Point] = attrs.field(factory=list)
    checkpoints: list[tuple[int, str, float]] = attrs.field(factory=list)
    by_step: dict[int, int] = attrs.field(factory=dict)
    """Index in ``points`` of the last point of each step (health lines name their step)."""
    evals: list[tuple[int, float | None, float]] = attrs.field(factory=list)
    relaunches: list[tuple[int, float]] = attrs.field(factory=list)
    """(step it relaunched from, 0 for from scratch; time) of each relaunch the agent logged."""


class RunMetrics:
    """The metrics of every run this server was asked about, each read incrementally."""

    def __init__(self) -> None:
        self._caches: dict[str, MetricsCache] = {}

    async def wire(self, view: RunView) -> dict[str, Any]:
        """``arena/metrics`` of one run: what its log says, reading only what is new."""
        return await asyncio.to_thread(run_metrics, view, self.cache(view))

    def cache(self, view: RunView) -> MetricsCache:
        """The run's cache, now the most recently used; the least recently used goes past the bound."""
        cache = self._caches.pop(view.run_id, None)
        if cache is None:
            spec = view.spec
            cache = MetricsCache(EventParser.for_patterns(spec.progress_pattern, spec.checkpoint_pattern))
        self._caches[view.run_id] = cache
        while len(self._caches) > KEEP_CACHES:
            del self._caches[next(iter(self._caches))]
        return cache


def run_metrics(view: RunView, cache: MetricsCache) -> dict[str, Any]:
    with cache.lock:
        _read_new_records(view, cache)
        return _metrics_wire(view.run_id, cache)


def _read_new_records(view: RunView, cache: MetricsCache) -> None:
    for index, stream, _, data, at in iter_records(view.run_dir.path, cache.next_record):
        cache.next_record = index + 1
        if stream == ARENA:
            _read_relaunches(cache, data, at)
            continue
        for event in cache.parser.parse_chunk(data):
            if isinstance(event, Progress):
                _add_point(cache, event, at)
            elif isinstance(event, Checkpoint):
                if cache.checkpoints and cache.checkpoints[-1][0] == event.step:
                    cache.checkpoints.pop()  # announced twice (a plain line, then @arena)
                cache.checkpoints.append((event.step, event.path, at))
            elif isinstance(event, Eval):
                cache.evals.append((event.step, event.loss, at))
        for health in health_in_chunk(data, at):
            _attach_health(cache, health.step, health.grad_norm, health.clip_fraction)
        if len(cache.points) > MAX_POINTS:
            cache.points = downsample(cache.points)
            cache.by_step = {point[0]: i for i, point in enumerate(cache.points)}


def _add_point(cache: MetricsCache, event: Progress, at: float) -> None:
    """A progress point; the same step announced again at once (a plain line and its
    ``@arena`` twin) is merged into the point before, never a second point."""
    if cache.points and cache.points[-1][0] == event.step:
        _, loss, lr, _, grad_norm, clip_fraction = cache.points[-1]
        cache.points[-1] = (
            event.step,
            event.loss if event.loss is not None else loss,
            event.lr if event.lr is not None else lr,
            at,
            grad_norm,
            clip_fraction,
        )
        return
    cache.by_step[event.step] = len(cache.points)
    cache.points.append((event.step, event.loss, event.lr, at, None, None))


def _read_relaunches(cache: MetricsCache, data: bytes, at: float) -> None:
    for line in data.decode("utf-8", "replace").splitlines():
        found = RESTART_LINE.match(line)
        if found:
            cache.relaunches.append((int(found.group(1)) if found.group(1) else 0, at))


def _metrics_wire(run_id: str, cache: MetricsCache) -> dict[str, Any]:
    return {
        "runId": run_id,
        "points": [
            {
                "step": s,
                "loss": finite(loss),
                "lr": lr,
                "at": iso_utc(at),
                "gradNorm": grad_norm,
                "clipFraction": clip_fraction,
            }
            for s, loss, lr, at, grad_norm, clip_fraction in cache.points
        ],
        "checkpoints": [{"step": s, "path": p, "at": iso_utc(at)} for s, p, at in cache.checkpoints],
        "evals": [{"step": s, "loss": finite(loss), "at": iso_utc(at)} for s, loss, at in cache.evals],
        "relaunches": [{"step": s, "at": iso_utc(at)} for s, at in cache.relaunches],
    }


def _attach_health(
    cache: MetricsCache, step: int | None, grad_norm: float | None, clip_fraction: float | None
) -> None:
    """Give the health values to the point of ``step``, or without a step to the last point."""
    index = cache.by_step.get(step) if step is not None else len(cache.points) - 1
    if index is None or not 0 <= index < len(cache.points):
        return
    s, loss, lr, at, _, _ = cache.points[index]
    cache.points[index] = (s, loss, lr, at, grad_norm, clip_fraction)


def downsample(points: list[Point]) -> list[Point]:
    """Every other point, plus the first, the last and the extreme losses."""
    keep = set(range(0, len(points), 2)) | {len(points) - 1}
    finite = [
        (point[1], i) for i, point in enumerate(points) if point[1] is not None and math.isfinite(point[1])
    ]
    if finite:
        keep |= {min(finite)[1], max(finite)[1]}
    return [points[i] for i in sorted(keep)]
