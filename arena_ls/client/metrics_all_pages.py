"""A run's whole ``arena/metrics``, read page by page (contract 7.2).

The server answers at most ``limit`` points, ``limit`` checkpoints and
``limit`` evals a page (10,000 by default) and says where the next page
starts (``next``). A client that read only the first page plotted the first
10,000 points of a long run and listed its first 10,000 checkpoints: this
follows ``next`` until the run's metrics end.

The end is ``next: null`` (a finished run read to its end), or a page that is
not full: while a run is live ``next`` is always a cursor (a live plot would
follow it), so a page with room left means the page reached the end of the
log as it was when it was read. A server older than 7.2 ignores ``limit``
and ``cursor`` and answers everything with no ``next``: one page, as before.

A step announced twice (a plain ``step N`` line, then its ``@arena`` twin) is
one point on the server's page; when the two fall on both sides of a page
boundary they are merged here the same way (the later fills in what the
earlier lacked), and so is a checkpoint announced twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

PAGE_LIMIT = 10_000
"""Points (and checkpoints, and evals) asked for per page: the contract's default and the
server's largest page."""
SERIES = ("points", "checkpoints", "evals", "relaunches", "rollbacks")

Request = Callable[[str, dict[str, Any]], Awaitable[Any]]
"""``LspSession.request`` (or a test client's ``call``): a method, its params, the result."""


async def read_all_metrics(request: Request, run_id: str, limit: int = PAGE_LIMIT) -> dict[str, Any]:
    """Every page of ``arena/metrics`` of ``run_id``, merged into one result of the same shape
    (``next`` is the cursor after the last page read: null once the run's metrics ended)."""
    merged: dict[str, Any] = {"runId": run_id, **{name: [] for name in SERIES}, "next": None}
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"runId": run_id, "limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        page = await request("arena/metrics", params)
        if not isinstance(page, dict):
            return merged
        _merge(merged, page)
        following = page.get("next")
        merged["next"] = following if isinstance(following, str) else None
        if not isinstance(following, str) or following == cursor or not _full(page, limit):
            return merged
        cursor = following


def _full(page: dict[str, Any], limit: int) -> bool:
    """A page that stopped at ``limit`` (more may follow at once), not at the end of the log."""
    return any(len(_items(page, name)) >= limit for name in ("points", "checkpoints", "evals"))


def _items(page: dict[str, Any], name: str) -> list[dict[str, Any]]:
    values = page.get(name)
    return [item for item in values if isinstance(item, dict)] if isinstance(values, list) else []


def _merge(merged: dict[str, Any], page: dict[str, Any]) -> None:
    """Append a page; a step announced again at once across the boundary is one point."""
    for name in SERIES:
        items = _items(page, name)
        so_far: list[dict[str, Any]] = merged[name]
        if items and so_far and name in ("points", "checkpoints") and _same_step(so_far[-1], items[0]):
            earlier = so_far.pop()
            items[0] = {**earlier, **{k: v for k, v in items[0].items() if v is not None}}
        so_far.extend(items)


def _same_step(earlier: dict[str, Any], later: dict[str, Any]) -> bool:
    step = earlier.get("step")
    return isinstance(step, int) and step == later.get("step")
