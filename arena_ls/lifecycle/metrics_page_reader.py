"""A run's metrics, read a page at a time from its records (the reading side of ``arena/metrics``).

Read from the run's log on disk (so it survives server restarts), a page at
a time (contract 7.2): a page holds at most ``limit`` points, ``limit``
checkpoints and ``limit`` evals, in log order, and ``next`` is the cursor of
the page after it. Nothing of a run's metrics is kept between requests, so
the server's memory does not grow with a run's length: a run that announced
1,000,000 checkpoints is 100 pages of 10,000, each read from where the last
one stopped (the cursor names a record of the log's index, which is found
by one seek, and the line within it).

``next`` is null once the run is over and the page reaches the end of its
log; while the run is live it is always a cursor, from which the lines
written since are read (a live plot follows it). The reading runs on a
worker thread: a long log is never parsed on the event loop.
A health line (``@arena {"event": "health", ...}``) gives ``gradNorm`` and
``clipFraction`` to the progress point of its step on the same page (the
last point of the page when it names none).

A step announced twice (the reference trainer prints ``step N/600 loss ...``
and then ``@arena {"event": "progress", ...}`` for the same step) is one point,
the later announcement filling in what the earlier one lacked. The agent's own
``restarting`` records (``agent_records``; ``restarting from step N`` lines of runs written
before them) give ``relaunches``: where the watchdog
relaunched the trainer inside the run (``arena plot`` marks exactly those).

Each line is decoded by the one record grammar (``records.decode_line``);
the page is plain data, which ``protocol.metrics_request`` shapes for the wire.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from arena_ls.lifecycle.health_line import HealthPoint
from arena_ls.lifecycle.records import AgentLine, Item, TrainerEvent, decode_line, might_hold_items
from arena_ls.lifecycle.runview import RunView
from arena_ls.run.agent_records import might_be_relaunch
from arena_ls.run.capture_records import iter_records
from arena_ls.run.outputlog import ARENA
from arena_ls.run.trainer_announcements import Checkpoint, Eval, EventParser, Progress

DEFAULT_LIMIT = 10_000
MAX_LIMIT = 10_000
"""The most points (and checkpoints, and evals) one page carries."""
CURSOR = re.compile(r"m1\.(\d{1,15})\.(\d{1,9})\.([01])")

Point = list[Any]
"""[step, loss, lr, at, gradNorm, clipFraction] while a page is built."""


@attrs.frozen
class MetricsCursor:
    """Where a page starts: a record of the log's index, the line within it, and whether the
    trainer had announced an ``@arena`` checkpoint before it (the parser's one piece of state)."""

    record: int = 0
    line: int = 0
    speaks_arena: bool = False

    def encode(self) -> str:
        return f"m1.{self.record}.{self.line}.{int(self.speaks_arena)}"

    @classmethod
    def decode(cls, text: str) -> MetricsCursor:
        match = CURSOR.fullmatch(text)
        if match is None:
            raise ValueError("not a cursor from arena/metrics")
        return cls(int(match.group(1)), int(match.group(2)), match.group(3) == "1")


@attrs.define
class MetricsPage:
    """One page: points, checkpoints, evals and relaunches in log order, and where the next starts."""

    limit: int
    points: list[Point] = attrs.field(factory=list)
    checkpoints: list[tuple[int, str, float]] = attrs.field(factory=list)
    evals: list[tuple[int, float | None, float]] = attrs.field(factory=list)
    by_step: dict[int, int] = attrs.field(factory=dict)
    relaunches: list[tuple[int, float]] = attrs.field(factory=list)
    """(step it relaunched from, 0 for from scratch; time) of each relaunch the agent logged."""
    rollbacks: list[tuple[int, int, int, float]] = attrs.field(factory=list)
    """(spike step, step resumed from, batches skipped, time) of each loss-spike rollback (8.2)."""
    next: MetricsCursor | None = None
    """The cursor of the page after it; None once an ended run's log is read to its end."""

    @property
    def full(self) -> bool:
        limit = self.limit
        return len(self.points) >= limit or len(self.checkpoints) >= limit or len(self.evals) >= limit


def read_metrics(view: RunView, cursor: MetricsCursor, limit: int, final_before: bool) -> MetricsPage:
    """A page from ``cursor`` (files only: safe in a thread)."""
    parser = view.new_parser()
    parser.speaks_arena = cursor.speaks_arena
    page = MetricsPage(limit)
    next_record = cursor.record
    for index, stream, _, data, at in iter_records(view.run_dir.path, cursor.record):
        next_record = index + 1
        if not _worth_reading(parser, stream, data):
            continue
        lines = data.splitlines()
        for number in range(cursor.line if index == cursor.record else 0, len(lines)):
            if page.full:
                page.next = MetricsCursor(index, number, parser.speaks_arena)
                return page
            item = decode_line(parser, stream, lines[number], at)
            if item is not None:
                _add(page, item)
    if not final_before:
        page.next = MetricsCursor(next_record, 0, parser.speaks_arena)
    return page


def _worth_reading(parser: EventParser, stream: int, data: bytes) -> bool:
    """Whether a record can hold a metric: the agent's own lines only a relaunch."""
    if stream == ARENA:
        return might_be_relaunch(data)
    return might_hold_items(parser, stream, data)


def _add(page: MetricsPage, item: Item) -> None:
    if isinstance(item, AgentLine):
        event = item.event
        if event.is_relaunch:
            page.relaunches.append((event.step or 0, item.at))
        elif event.is_rollback:
            spike, skip = event.int_field("spike") or 0, event.int_field("skip") or 0
            page.rollbacks.append((spike, event.step or 0, skip, item.at))
    elif isinstance(item, HealthPoint):
        _attach_health(page, item.step, item.grad_norm, item.clip_fraction)
    else:
        _add_event(page, item)


def _add_event(page: MetricsPage, item: TrainerEvent) -> None:
    event = item.event
    if isinstance(event, Progress):
        _add_point(page, event, item.at)
    elif isinstance(event, Checkpoint):
        if page.checkpoints and page.checkpoints[-1][0] == event.step:
            page.checkpoints.pop()  # announced twice (a plain line, then @arena)
        page.checkpoints.append((event.step, event.path, item.at))
    elif isinstance(event, Eval):
        page.evals.append((event.step, event.loss, item.at))


def _add_point(page: MetricsPage, event: Progress, at: float) -> None:
    """A progress point; the same step announced again at once (a plain line and its
    ``@arena`` twin) is merged into the point before, never a second point."""
    if page.points and page.points[-1][0] == event.step:
        point = page.points[-1]
        point[1] = event.loss if event.loss is not None else point[1]
        point[2] = event.lr if event.lr is not None else point[2]
        point[3] = at
        return
    page.by_step[event.step] = len(page.points)
    page.points.append([event.step, event.loss, event.lr, at, None, None])


def _attach_health(page: MetricsPage, step: int | None, grad_norm: float | None, clip: float | None) -> None:
    """Give the health values to the point of ``step``, or without a step to the last point."""
    index = page.by_step.get(step) if step is not None else len(page.points) - 1
    if index is None or not 0 <= index < len(page.points):
        return
    page.points[index][4] = grad_norm
    page.points[index][5] = clip
