"""``arena/log`` batching with a bounded rate, so a flooding trainer cannot freeze the editor.

Lines are batched per run and sent at most ``logs.notifyHz`` times a second.
Each second carries at most ``MAX_BYTES_PER_SECOND`` of line text; lines past
the bound are replaced by one summary line (stream ``arena``) saying how many
were not shown. They are never lost: the log on disk and ``arena/logs`` have
them all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from arena_ls.run.capture import LogLine
from arena_ls.timeutil import iso_utc_now

log = logging.getLogger(__name__)

MAX_BYTES_PER_SECOND = 1 << 20
"""1 MiB/s of line text per client (the contract allows at most 2 MB/s)."""
MAX_LINES_PER_BATCH = 1000

Send = Callable[[str, dict[str, Any]], None]


class LogBatcher:
    """Collects lines and flushes them on a timer (never more than ``hz`` a second)."""

    def __init__(
        self, send: Send, hz: Callable[[], float], refresh: Callable[[], None] | None = None
    ) -> None:
        self._send = send
        self._hz = hz
        self._refresh = refresh
        """Called just before a flush, so that a batch leaves with the lines written up to now."""
        self._pending: dict[str, list[dict[str, Any]]] = {}
        """Lines already in their wire form: converted as they come, not while a flush is due."""
        self._dropped: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_flush = 0.0
        self._window_start = 0.0
        self._window_bytes = 0

    def add(self, run_id: str, lines: list[LogLine], skipped: int = 0) -> None:
        """Queue lines; ``skipped`` lines were never read (a flood): they join the summary."""
        now = time.monotonic()
        if skipped:
            self._dropped[run_id] = self._dropped.get(run_id, 0) + skipped
        if now - self._window_start >= 1.0:
            self._window_start, self._window_bytes = now, 0
        kept = self._pending.setdefault(run_id, [])
        for line in lines:
            size = len(line.text) + 64
            if self._window_bytes + size > MAX_BYTES_PER_SECOND or len(kept) >= MAX_LINES_PER_BATCH:
                self._dropped[run_id] = self._dropped.get(run_id, 0) + 1
                continue
            self._window_bytes += size
            kept.append(line.to_wire())
        self._schedule(now)

    def _schedule(self, now: float) -> None:
        if self._timer is not None:
            return
        interval = 1.0 / max(0.1, self._hz())
        delay = max(0.0, self._last_flush + interval - now)
        self._timer = asyncio.get_running_loop().call_later(delay, self.flush)

    def flush(self) -> None:
        self._timer = None
        # The period counts from when the flush began, so reading and sending
        # do not stretch it (lines would otherwise wait longer than 1/hz).
        self._last_flush = time.monotonic()
        if self._refresh is not None:
            try:
                self._refresh()  # may queue lines (and a timer): this flush takes them
            except Exception:  # a failed read must not hold back what is queued
                log.exception("reading new lines before a flush failed")
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        pending, self._pending = self._pending, {}
        dropped, self._dropped = self._dropped, {}
        for run_id in set(pending) | set(dropped):
            wire = pending.get(run_id, [])
            if dropped.get(run_id):
                last_seq = wire[-1]["seq"] if wire else None
                wire.append(
                    {
                        "seq": last_seq,
                        "stream": "arena",
                        "text": f"… {dropped[run_id]} lines not shown here (rate bound); "
                        "all are in the log file and arena/logs",
                        "at": iso_utc_now(),
                        "summary": True,
                    }
                )
            if wire:
                self._send("arena/log", {"runId": run_id, "lines": wire})
