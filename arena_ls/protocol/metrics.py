"""``arena/metrics``: a run's loss, lr and gradient-health history and its checkpoints, paged.

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
``restarting`` records (``supervisor_events``; ``restarting from step N`` lines of runs written
before them) give ``relaunches``: where the watchdog
relaunched the trainer inside the run (``arena plot`` marks exactly those).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import attrs

from arena_ls.insights.parse import MARK, PREFIX, parse_health
from arena_ls.lifecycle.capture import iter_records
from arena_ls.lifecycle.events import Checkpoint, Eval, EventParser, Progress
from arena_ls.lifecycle.outputlog import ARENA
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.supervisor_events import might_be_relaunch, parse_bytes
from arena_ls.protocol.preencoded import PreEncoded
from arena_ls.timeutil import iso_utc
from arena_ls.validation import finite

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


async def metrics_page(view: RunView, cursor: MetricsCursor | None, limit: int) -> dict[str, Any]:
    """One page of ``arena/metrics``, read on a worker thread."""
    view.refresh_state()
    final_before = view.is_final  # judged before reading: lines written meanwhile are on the next page
    return await asyncio.to_thread(read_page, view, cursor or MetricsCursor(), limit, final_before)


async def metrics_answer(view: RunView, cursor: MetricsCursor | None, limit: int) -> PreEncoded:
    """``metrics_page`` as the answer's JSON, encoded on the worker thread too (a page of 10,000
    points and 10,000 checkpoints is about a megabyte: tens of milliseconds of ``json.dumps``)."""
    view.refresh_state()
    final_before = view.is_final

    def encoded() -> PreEncoded:
        return PreEncoded.of(read_page(view, cursor or MetricsCursor(), limit, final_before))

    return await asyncio.to_thread(encoded)


@attrs.define
class _Page:
    limit: int
    points: list[Point] = attrs.field(factory=list)
    checkpoints: list[tuple[int, str, float]] = attrs.field(factory=list)
    evals: list[tuple[int, float | None, float]] = attrs.field(factory=list)
    by_step: dict[int, int] = attrs.field(factory=dict)
    relaunches: list[tuple[int, float]] = attrs.field(factory=list)
    """(step it relaunched from, 0 for from scratch; time) of each relaunch the agent logged."""

    @property
    def full(self) -> bool:
        limit = self.limit
        return len(self.points) >= limit or len(self.checkpoints) >= limit or len(self.evals) >= limit


def read_page(view: RunView, cursor: MetricsCursor, limit: int, final_before: bool) -> dict[str, Any]:
    """A page from ``cursor`` (files only: safe in a thread)."""
    spec = view.spec
    parser = EventParser.for_patterns(spec.progress_pattern, spec.checkpoint_pattern)
    parser.speaks_arena = cursor.speaks_arena
    page = _Page(limit)
    stopped: MetricsCursor | None = None
    next_record = cursor.record
    for index, stream, _, data, at in iter_records(view.run_dir.path, cursor.record):
        next_record = index + 1
        agent = stream == ARENA
        if not _worth_reading(parser, data, agent):
            continue
        lines = data.splitlines()
        for number in range(cursor.line if index == cursor.record else 0, len(lines)):
            if page.full:
                stopped = MetricsCursor(index, number, parser.speaks_arena)
                break
            if agent:
                _read_relaunch(page, lines[number], at)
            else:
                _read_line(parser, page, lines[number], at)
        if stopped is not None:
            break
    if stopped is None and not final_before:
        stopped = MetricsCursor(next_record, 0, parser.speaks_arena)
    return _wire(view.run_id, page, stopped)


def _worth_reading(parser: EventParser, data: bytes, agent: bool) -> bool:
    """Whether a record can hold an event: the agent's own lines only a relaunch."""
    if agent:
        return might_be_relaunch(data)
    return parser.might_match(data) or MARK in data


def _read_relaunch(page: _Page, raw: bytes, at: float) -> None:
    event = parse_bytes(raw)
    if event.is_relaunch:
        page.relaunches.append((event.step or 0, at))


def _read_line(parser: EventParser, page: _Page, raw: bytes, at: float) -> None:
    if raw.startswith(PREFIX) and MARK in raw:
        health = parse_health(raw.decode("utf-8", "replace"), at)
        if health is not None:
            _attach_health(page, health.step, health.grad_norm, health.clip_fraction)
            return
    line = raw.decode("utf-8", "replace")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1] or line
    event = parser.parse(line)
    if isinstance(event, Progress):
        _add_point(page, event, at)
    elif isinstance(event, Checkpoint):
        if page.checkpoints and page.checkpoints[-1][0] == event.step:
            page.checkpoints.pop()  # announced twice (a plain line, then @arena)
        page.checkpoints.append((event.step, event.path, at))
    elif isinstance(event, Eval):
        page.evals.append((event.step, event.loss, at))


def _add_point(page: _Page, event: Progress, at: float) -> None:
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


def _attach_health(page: _Page, step: int | None, grad_norm: float | None, clip: float | None) -> None:
    """Give the health values to the point of ``step``, or without a step to the last point."""
    index = page.by_step.get(step) if step is not None else len(page.points) - 1
    if index is None or not 0 <= index < len(page.points):
        return
    page.points[index][4] = grad_norm
    page.points[index][5] = clip


def _wire(run_id: str, page: _Page, stopped: MetricsCursor | None) -> dict[str, Any]:
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
            for s, loss, lr, at, grad_norm, clip_fraction in page.points
        ],
        "checkpoints": [{"step": s, "path": p, "at": iso_utc(at)} for s, p, at in page.checkpoints],
        "evals": [{"step": s, "loss": finite(loss), "at": iso_utc(at)} for s, loss, at in page.evals],
        "relaunches": [{"step": s, "at": iso_utc(at)} for s, at in page.relaunches],
        "next": stopped.encode() if stopped is not None else None,
    }
