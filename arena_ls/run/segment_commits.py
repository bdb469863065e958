"""A capped log's segment table saved beside the pump, never in its way (issue 39, item 7).

``output.segments.json`` is replaced atomically and synced (``save_table``):
on a loaded disk one sync takes 5-40 ms, and a flood makes a megabyte in
less. Done by the trainer's pump, each save held the pipe, and a trainer
writing faster than that waited on arena-ls's own bookkeeping. So the
agent's writer hands each new table to a ``TableCommitter`` and writes on;
the committer's thread syncs the middle (``output.mid.*``, which the table
may now count), saves the table, and only then deletes the segments that
table no longer lists. Saves coalesce: a table handed over while one is
being saved replaces any still waiting, so a flood costs one save per sync's
time, however many segments it fills.

What readers see is unchanged: nothing beyond the saved table. The writer
bounds how far it runs ahead (``OutputWriter._may_rotate``): it moves on to
a new segment only once the table listing the one before the current is
saved, so at most two segments' lines (the current and the one before) wait
for their save, for the time of one sync. A save that fails (a full disk) is
tried again, with pauses, until it succeeds or the writer closes; meanwhile
the writer does not rotate (its current segment grows on, as when a
synchronous rotation fails) and no dropped segment is deleted: nothing the
saved table lists is ever missing.

Standard library only, like the writer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from arena_ls.run.logsegments import MID_IDX, MID_LOG, save_table_bytes, segment_paths

log = logging.getLogger("arena_ls.agent")

RETRY_PAUSES = (0.05, 0.1, 0.2, 0.5, 1.0)
"""Pauses between tries of a save that failed (the last one repeats)."""


class TableCommitter:
    """Saves the newest table handed over, on a thread of its own; deletes dropped segments after.

    ``save`` is injectable for tests (it gets the run folder and the table's bytes)."""

    def __init__(self, run_dir: Path, save: Callable[[Path, bytes], None] = save_table_bytes) -> None:
        self._run_dir = run_dir
        self._save = save
        self._cond = threading.Condition()
        self._wanted: bytes | None = None
        self._wanted_generation = 0
        self._sync_middle = False
        self._saved_generation = 0
        self._deletions: list[tuple[int, int]] = []
        """(generation, segment): deleted once the table of that generation is saved."""
        self._held: list[int] = []
        """Dropped segments that could not be deleted (held open, Windows): tried after each save."""
        self.error: OSError | None = None
        """Why the newest save failed (None once one succeeds)."""
        self.saves = 0
        self._closing = False
        self._thread: threading.Thread | None = None

    @property
    def saved_generation(self) -> int:
        with self._cond:
            return self._saved_generation

    def submit(self, data: bytes, dropped: list[int], middle_grew: bool) -> int:
        """Hand over a table (its JSON); ``dropped``: segments it no longer lists. Its generation."""
        with self._cond:
            self._wanted_generation += 1
            generation = self._wanted_generation
            self._wanted = data
            self._sync_middle = self._sync_middle or middle_grew
            self._deletions += [(generation, k) for k in dropped]
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="segment-table", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return generation

    def wait_saved(
        self, generation: int, timeout: float | None = None, *, through_failures: bool = False
    ) -> bool:
        """Wait until the table of ``generation`` (or a newer one) is saved; False when ``timeout``
        passes first, or at once on a failed save (``error``) unless ``through_failures`` (the
        committer tries again meanwhile)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._saved_generation < generation and (through_failures or self.error is None):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return self._saved_generation >= generation

    def close(self, timeout: float) -> bool:
        """Save what is waiting (trying for at most ``timeout`` seconds), then stop. True when
        everything handed over is saved."""
        with self._cond:
            generation = self._wanted_generation
        saved = self.wait_saved(generation, timeout, through_failures=True)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._cond:
            held, self._held = self._held, []
        self._held = [k for k in held if not self._delete(k)]  # a reader let go meanwhile (Windows)
        return saved

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while self._wanted is None and not self._closing:
                    self._cond.wait()
                if self._wanted is None:
                    return
                data, generation, middle = self._wanted, self._wanted_generation, self._sync_middle
            try:
                if middle:
                    _sync_middle(self._run_dir)
                self._save(self._run_dir, data)
            except OSError as error:
                failures += 1
                with self._cond:
                    if self.error is None:
                        log.warning("the log's segment table could not be saved (%s); trying again", error)
                    self.error = error
                    self._cond.notify_all()
                    if self._closing:
                        return
                    self._cond.wait(RETRY_PAUSES[min(failures, len(RETRY_PAUSES)) - 1])
                continue
            failures = 0
            with self._cond:
                self.saves += 1
                self._saved_generation = max(self._saved_generation, generation)
                if self._wanted is data:
                    self._wanted = None
                    self._sync_middle = False
                self.error = None
                due = [k for g, k in self._deletions if g <= generation]
                self._deletions = [(g, k) for g, k in self._deletions if g > generation]
                held, self._held = self._held, []
                self._cond.notify_all()
            still_held = [k for k in held + due if not self._delete(k)]
            if still_held:
                with self._cond:
                    self._held += still_held

    def _delete(self, k: int) -> bool:
        from arena_ls import platform

        try:
            return all([platform.remove_file(path) for path in segment_paths(self._run_dir, k)])
        except OSError:
            return False


def _sync_middle(run_dir: Path) -> None:
    """Sync what the writer appended to the middle before a table that counts it is saved."""
    for name in (MID_LOG, MID_IDX):
        try:
            fd = os.open(run_dir / name, os.O_WRONLY | getattr(os, "O_BINARY", 0))
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
