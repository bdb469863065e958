"""``arena/metrics`` (contract 7.2): a page of a run's metrics, read off the event loop, as wire.

The page is read by ``lifecycle.metrics_page_reader`` (what a page holds, its cursor and
why nothing is kept between requests are documented there); this module runs
that reading on a worker thread and shapes the page as the contract's answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from arena_ls.lifecycle.metrics_page_reader import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MetricsCursor,
    MetricsPage,
    read_metrics,
)
from arena_ls.lifecycle.runview import RunView
from arena_ls.protocol.rpc.preencoded import PreEncoded
from arena_ls.run.rundir import RelaunchRecord
from arena_ls.timeutil import iso_utc
from arena_ls.validation import finite

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "MetricsCursor", "metrics_answer", "metrics_page", "read_page"]


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


def read_page(view: RunView, cursor: MetricsCursor, limit: int, final_before: bool) -> dict[str, Any]:
    """A page from ``cursor``, as the answer's object (files only: safe in a thread)."""
    state = view.state
    relaunches = list(state.relaunches) if state is not None else []
    return _wire(view.run_id, read_metrics(view, cursor, limit, final_before), relaunches)


MATCH_SECONDS = 5.0
"""A logged relaunch and the agent's record of it were written within this of each other."""


def _relaunch(step: int, at: float, records: list[RelaunchRecord]) -> dict[str, Any]:
    """A relaunch the log shows, with what it cost from the agent's record of it (matched by its
    step and time: a page holds any part of the log); null figures when no record matches (a run
    of an earlier agent)."""
    record = next(
        (r for r in records if (r.from_step or 0) == step and abs(r.at - at) <= MATCH_SECONDS), None
    )
    return {
        "step": step,
        "at": iso_utc(at),
        "stepsLost": record.steps_lost if record is not None else None,
        "downtimeSeconds": record.downtime_seconds if record is not None else None,
    }


def _wire(run_id: str, page: MetricsPage, relaunches: list[RelaunchRecord]) -> dict[str, Any]:
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
        "relaunches": [_relaunch(s, at, relaunches) for s, at in page.relaunches],
        "rollbacks": [
            {"step": back_to, "spikeStep": spike, "skipBatches": skip, "at": iso_utc(at)}
            for spike, back_to, skip, at in page.rollbacks
        ],
        "next": page.next.encode() if page.next is not None else None,
    }
