"""The agent's side of a run's captured output: the format and the writer (its pipe pumps: ``agent.pumps``).

The agent appends what the trainer writes, in large chunks, to
``output.log`` (plain bytes, readable with ``tail -f``) and one fixed-size
record per chunk to ``output.idx``. A record says which stream the chunk
came from, when it arrived, and the sequence number of its first line. The
agent only writes whole lines in a record, except for an overlong line
(over ``LINE_LIMIT`` bytes without a newline), which it writes in
continuation records so that memory stays bounded.

Past ``logs.maxRunMb`` the log is written as head, tail segments and middle
(``logsegments``); the agents' writers hand each new segment table to a
``segment_commits.TableCommitter`` (``background_commits``), so that a flood
never waits for a sync of arena-ls's own bookkeeping.

Standard library only: ``launch`` starts the trainer and its pumps
(``agent.pumps``) with it before the rest of the agent is loaded, so the trainer's first lines reach
the log as fast as its later ones. ``capture`` reads the files back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from arena_ls.run import late_imports
from arena_ls.run.log_drop import append_mid, delete_segments, dropped_leftovers, extract, files_size
from arena_ls.run.log_record import (
    ANNOUNCEMENT_PREFIX,
    ARENA,
    FLAG_CONTINUED,
    FLAG_FINAL_PARTIAL,
    FLAG_INERT,
    FLAG_LINES,
    FLAG_QUIET,
    LINE_LIMIT,
    MAX_RECORD_BYTES,
    RECORD,
    STDERR,
    STDOUT,
    STREAMS,
    DamagedLog,
    check_record,
    inert_lines,
    quiet_lines,
    write_all,
)
from arena_ls.run.logsegments import (
    DEFAULT_MAX_RUN_MB,
    HEAD,
    SEGMENT_FLOOR_BYTES,
    SegmentsDamaged,
    Table,
    Tail,
    cap_bytes,
    load_table,
    save_table,
    segment_bytes,
    segment_paths,
    table_bytes,
)
from arena_ls.run.segment_commits import TableCommitter

__all__ = [
    "AHEAD",
    "ANNOUNCEMENT_PREFIX",
    "ARENA",
    "CLOSE_PATIENCE",
    "FLAG_CONTINUED",
    "FLAG_FINAL_PARTIAL",
    "FLAG_INERT",
    "FLAG_LINES",
    "FLAG_QUIET",
    "FLUSH_PATIENCE",
    "LINE_LIMIT",
    "MAX_RECORD_BYTES",
    "RECORD",
    "ROTATION_PATIENCE",
    "STDERR",
    "STDOUT",
    "STREAMS",
    "DamagedLog",
    "OutputWriter",
    "Written",
    "check_record",
    "count_recorded_lines",
    "inert_lines",
    "quiet_lines",
]
"""The record format's names (``log_record``) stay importable from here, beside the writer."""

log = logging.getLogger("arena_ls.agent")

AHEAD = 2
"""With background commits, the writer moves on to a new segment only once the table listing the
segment ``AHEAD`` back is saved: at most ``AHEAD`` segments' lines wait for a save (not yet
readable), and at most about as many dropped segments for their deletion."""
ROTATION_PATIENCE = 1.0
"""The longest a rotation waits for the table listing the segment before the current one (one
sync; a disk slower than that lets the current segment grow on instead of holding the trainer's
pipe, and the next rotations do not wait until that save is done)."""
FLUSH_PATIENCE = 2.0
"""How long an agent waits for its log's last table before it records the run's end (a full disk
must not hold the outcome: the close tries on, for ``CLOSE_PATIENCE``)."""
CLOSE_PATIENCE = 10.0
"""The longest the writer's close waits for its last table (a full disk: tried until then)."""


_SEGMENT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0)


class Written(NamedTuple):
    """What one ``OutputWriter.append`` recorded, for the agent's scan."""

    complete: bytes
    """The complete lines it finished (one record, or its pieces at a segment's end)."""
    quiet: bool
    """They can announce nothing but progress (the record is ``FLAG_QUIET``)."""
    update: bytes
    """An unfinished line's latest state (a progress bar redrawn in place), or empty."""


class OutputWriter:
    """Agent side: appends chunks from the trainer's pipes, whole lines at a time.

    Thread-safe: one reader thread per stream calls ``append``.
    """

    def __init__(
        self,
        run_dir: Path,
        max_bytes: int | str | None = "from spec",
        segment_floor: int = SEGMENT_FLOOR_BYTES,
        background_commits: bool = False,
    ) -> None:
        """``max_bytes``: the log's cap (``logs.maxRunMb``); by default the run's ``spec.json`` says.
        ``segment_floor``: the smallest tail segment (tests of the format pass a small one to see
        many segments in a few kilobytes; the agent keeps the default, see ``SEGMENT_FLOOR_BYTES``).
        ``background_commits``: the segment table is saved on a thread of its own
        (``segment_commits``), as the agents' writers do; without it each save is done in
        ``append`` (its readers see a rotation or a drop as soon as ``append`` returns)."""
        self._run_dir = run_dir
        self._segment_floor = segment_floor
        self._committer = TableCommitter(run_dir) if background_commits else None
        self._rotations: list[int] = []
        """The generations of the tables that listed the last ``AHEAD`` new segments (background
        commits: the drops in between do not count, a segment dropped since was listed all the same)."""
        spec = _read_spec(run_dir)
        self._spec = spec
        self._quiet_allowed = bool(spec) and not spec.get("checkpointPattern")
        """``FLAG_QUIET`` is written only for a job known to have no ``checkpoint.pattern`` (any
        line may match one): never when the spec could not be read."""
        self._cap = (
            cap_bytes(spec.get("logMaxRunMb", DEFAULT_MAX_RUN_MB))
            if isinstance(max_bytes, str)
            else max_bytes
        )
        self._inert_allowed = bool(self._cap) and self._quiet_allowed and not spec.get("progressPattern")
        """``FLAG_INERT`` besides, past the head of a capped log (the head is never dropped) of a job
        whose only progress spellings are the built-in ones: a drop reads none of its records."""
        self._lock = threading.Lock()
        self._pending: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
        self._table = self._resumed_table()
        self._tail_bytes: dict[int, int] = {}
        """The size (log and index) of each kept tail segment but the one being written."""
        self._saved_doomed: list[int] = []
        """``doomed`` as the table on disk has it (see ``_delete_doomed``)."""
        if self._table is not None:
            self._saved_doomed = list(self._table.doomed)
            self._table.doomed = dropped_leftovers(run_dir, self._table)
            for tail in self._table.tails[:-1]:
                self._tail_bytes[tail.k] = files_size(*segment_paths(run_dir, tail.k))
        self._keep: tuple[Callable[[bytes, bool], bool], Callable[[bytes], bool]] | None = None
        self._segment = HEAD
        self._log_fd = self._idx_fd = -1
        self._open_segment(self._table.current.k if self._table is not None else HEAD)
        self.unwritten_lines = 0
        """Lines that could not be written since the last successful write (a full disk)."""
        self.unwritten_bytes = 0
        self.write_failures = 0
        """Every failed write so far (the agent turns a new one into ``disk-full`` evidence)."""
        self.last_error: OSError | None = None
        self.rotation_error: OSError | None = None
        """Why the log could not move on to its next segment (it then grows past its cap)."""
        self.keep_error: Exception | None = None
        """Why the last drop could not load what it keeps (``logkeep``): said once, tried at each drop."""
        self.commits = 0
        """Tables made so far (saved, or handed to the committer, which may save several as one):
        two a tail segment (its rotation, its drop), and one at the close."""

    def _resumed_table(self) -> Table | None:
        """The segment table of a log this writer continues (an agent started again)."""
        try:
            return load_table(self._run_dir)
        except SegmentsDamaged as error:
            log.warning("%s; the log is written on uncapped", error)
            self._cap = None
            return None

    def _open_segment(self, k: int, made: tuple[int, int] | None = None) -> None:
        """Append to segment ``k`` (the head, or a tail listed in the table); ``made``: its files,
        just made empty by a rotation (their descriptors)."""
        if made is not None:
            self._log_fd, self._idx_fd, self._segment = made[0], made[1], k
            self._offset = self._idx_size = 0
        else:
            log_path, idx_path = segment_paths(self._run_dir, k)
            log_fd = os.open(log_path, _SEGMENT_FLAGS, 0o644)
            try:
                idx_fd = os.open(idx_path, _SEGMENT_FLAGS, 0o644)
            except OSError:
                os.close(log_fd)
                raise
            self._log_fd, self._idx_fd, self._segment = log_fd, idx_fd, k
            self._offset = os.fstat(log_fd).st_size
            self._idx_size = os.fstat(idx_fd).st_size
        idx_path = segment_paths(self._run_dir, k)[1]
        tail = self._table.tail(k) if self._table is not None else None
        self._base = tail.base if tail is not None else 0
        self._records = self._idx_size // RECORD.size
        first_seq = tail.first_seq if tail is not None else 0
        self._next_seq = count_recorded_lines(idx_path) if self._records else first_seq

    @property
    def lines_written(self) -> int:
        return self._next_seq

    def append(self, stream: int, data: bytes) -> Written:
        """Record a chunk; return the complete lines it finished (and whether they are quiet:
        ``FLAG_QUIET``) and an unfinished update.

        An unfinished line that carries a bare carriage return (a tqdm-style
        bar redrawn in place) is recorded at once as a continuation, so that
        its progress is seen live rather than when the bar finally ends its
        line. Only a ``\\r`` inside the unfinished line counts: one at its very
        end may be the first half of a ``\\r\\n`` (Windows line ends) whose
        ``\\n`` comes in the next chunk, and an earlier line's ``\\r\\n`` in
        the same chunk says nothing about the unfinished one.
        """
        with self._lock:
            pending = self._pending[stream]
            cut = data.rfind(b"\n")
            complete = b""
            quiet = False
            if cut < 0:
                pending += data
            else:
                complete = bytes(pending) + data[: cut + 1] if pending else data[: cut + 1]
                pending.clear()
                pending += data[cut + 1 :]
                quiet = self._quiet_allowed and quiet_lines(complete)
                flags = FLAG_LINES | FLAG_QUIET if quiet else FLAG_LINES
                if quiet and self._inert_allowed and self._segment != HEAD and inert_lines(complete):
                    flags |= FLAG_INERT
                self._write(stream, flags, complete, complete.count(b"\n"))
            update = b""
            if len(pending) > LINE_LIMIT or _redrawn_in_place(pending):
                update = bytes(pending)
                self._write(stream, FLAG_CONTINUED, update, 0)
                pending.clear()
            return Written(complete, quiet, update)

    def append_line(self, stream: int, text: str) -> None:
        """Record a line of the supervisor's own (``stream`` is usually ARENA).

        A text with newlines inside (an error page a cluster answered with) is
        that many lines: the index counts what a reader splits, so that the
        cursors of ``arena/logs`` stay valid."""
        data = text.rstrip("\n").encode("utf-8", "replace") + b"\n"
        with self._lock:
            self._write(stream, FLAG_LINES, data, data.count(b"\n"))

    def finish_stream(self, stream: int) -> bytes:
        """At a stream's end: record its last line if it had no newline."""
        with self._lock:
            pending = self._pending[stream]
            if not pending:
                return b""
            data = bytes(pending)
            pending.clear()
            self._write(stream, FLAG_FINAL_PARTIAL, data, 1)
            return data

    def _write(self, stream: int, flags: int, data: bytes, lines: int) -> None:
        """Write a chunk, cut at line ends where it crosses into the log's next segment.

        Uncapped, the chunk is one record. Capped (``logs.maxRunMb``), the
        head takes what fits of its half, the rest goes to tail segments of
        ``segment_bytes`` each; past the cap the oldest tail is dropped
        (``_trim``). A piece that has no line end to cut at (part of an
        overlong line, or a line longer than a segment) goes whole. ``lines``: the chunk's, as
        the caller counted them (each piece cut off is counted, the rest is what is left: a
        flood's megabyte is counted once).
        """
        while self._cap is not None:
            room = self._room() - RECORD.size
            if len(data) <= room:
                break
            whole_lines = (flags & ~(FLAG_QUIET | FLAG_INERT)) == FLAG_LINES
            cut = data.rfind(b"\n", 0, room) if whole_lines and room > 0 else -1
            if cut < 0:
                if self._used() and self._rotate():
                    self._trim()
                    continue
                break
            piece, data = data[: cut + 1], data[cut + 1 :]
            piece_lines = piece.count(b"\n")
            self._write_piece(stream, flags, piece, piece_lines)
            lines -= piece_lines  # only FLAG_LINES is cut, at a line end
            if not data or not self._rotate():
                break
            self._trim()  # at each segment: a megabyte read at once never holds more than one extra
        if data:
            self._write_piece(stream, flags, data, lines)
        if self._table is not None:
            self._trim()

    def _write_piece(self, stream: int, flags: int, data: bytes, lines: int) -> None:
        """Write a chunk and its record, or neither: a failed write (a full disk) is counted.

        The trainer never waits for the disk: what cannot be written is
        counted, and once writes succeed again one ``arena`` line says how
        many lines are missing, before the next chunk.
        """
        if self.unwritten_lines or self.unwritten_bytes:
            summary = (
                f"… {self.unwritten_lines} lines ({self.unwritten_bytes} bytes) of output could not be "
                f"written to the log: {_reason(self.last_error)}"
            ).encode() + b"\n"
            if not self._try_write(ARENA, FLAG_LINES, summary, 1):
                self._count_unwritten(data, lines, flags)
                return
            self.unwritten_lines = self.unwritten_bytes = 0
        if not self._try_write(stream, flags, data, lines):
            self._count_unwritten(data, lines, flags)

    # -- the cap ---------------------------------------------------------------------------

    def _used(self) -> int:
        return self._offset + self._idx_size

    def _room(self) -> int:
        """Bytes the segment being written still takes (log and index together)."""
        assert self._cap is not None
        half = self._cap // 2
        limit = half if self._segment == HEAD else segment_bytes(half, self._segment_floor)
        return limit - self._used()

    def _rotate(self) -> bool:
        """Move on to a new tail segment; False (the current one grows on) when it cannot be made."""
        assert self._cap is not None
        if not self._may_rotate():
            return False
        k = self._segment + 1
        table = self._table if self._table is not None else Table(self._cap, self._records, self._next_seq)
        fds: list[int] = []
        try:
            for path in segment_paths(self._run_dir, k):  # truncated: a leftover of a rotation cut short
                fds.append(os.open(path, _SEGMENT_FLAGS | os.O_TRUNC, 0o644))
            table.tails.append(Tail(k, self._base + self._records, self._next_seq))
            try:
                self._rotations = [*self._rotations, self._commit(table)][-AHEAD:]
            except OSError:
                table.tails.pop()
                raise
        except OSError as error:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if self.rotation_error is None:
                log.warning("the log cannot move on to its next segment (%s); it grows past its cap", error)
            self.rotation_error = error
            return False
        self.rotation_error = None
        previous = self._segment
        self._close_fds()
        if previous != HEAD:
            self._tail_bytes[previous] = self._used()
        self._table = table
        self._open_segment(k, (fds[0], fds[1]))
        return True

    def _may_rotate(self) -> bool:
        """With background commits: whether the writer may move on to a new segment.

        Only once the table listing the segment before the current one is saved (the writer
        waits for it: one sync at most, the time it took the current segment to fill), so that
        at most two segments' lines are not yet readable; never while saves fail (a full disk:
        the current segment grows on, as when a synchronous rotation fails)."""
        committer = self._committer
        if committer is None:
            return True
        needed = self._rotations[-AHEAD] if len(self._rotations) >= AHEAD else 0
        patience = 0.0 if self.rotation_error is not None else ROTATION_PATIENCE  # waited once already
        saved = committer.error is None and committer.wait_saved(needed, patience)
        if not saved:
            error = committer.error or TimeoutError("the segment table's save is slow")
            if self.rotation_error is None:
                log.warning("the log cannot move on to its next segment (%s); it grows past its cap", error)
            self.rotation_error = error
        return saved

    def _trim(self) -> None:
        """Drop the oldest tails while the others still hold half the cap."""
        table = self._table
        assert table is not None and self._cap is not None
        half = self._cap // 2
        while len(table.tails) > 1:
            oldest = table.oldest.k
            kept = sum(self._tail_bytes.values()) + self._used() - self._tail_bytes[oldest]
            if kept < half or not self._drop(table.oldest):
                break
        if table.doomed:
            self._delete_doomed(table)

    def _drop(self, tail: Tail) -> bool:
        """Move the kept lines of ``tail`` into the middle, then forget it (its files are deleted).

        The middle is appended to, synced, then committed by the table; a
        drop cut short (a full disk, a crash) leaves the tail listed and the
        uncommitted middle ignored (and overwritten by the next drop).
        """
        table = self._table
        assert table is not None
        try:
            keepers = self._keepers()
        except Exception as error:  # never out of append: the pump would die, the trainer block on its pipe
            if self.keep_error is None:
                log.warning("the log cannot drop its oldest segment yet (%r); it grows past its cap", error)
            self.keep_error = error
            return False
        try:
            ends = table.tails[1].first_seq if len(table.tails) > 1 else None
            drop = extract(self._run_dir, tail, keepers, ends)
            append_mid(self._run_dir, table, drop, sync=self._committer is None)
            saved = (table.mid_records, table.mid_bytes, table.dropped_lines, table.dropped_bytes)
            saved_gap, saved_records = table.gap_seq, table.dropped_records
            table.mid_records += drop.records
            table.mid_bytes += len(drop.text)
            table.dropped_lines += drop.lines
            table.dropped_bytes += drop.bytes
            table.dropped_records += drop.source_records
            table.gap_seq = drop.gap_seq if drop.gap_seq is not None else table.gap_seq
            table.tails.pop(0)
            try:
                self._commit(table, dropped=[tail.k], middle_grew=drop.records > 0)
            except OSError:
                table.tails.insert(0, tail)
                table.mid_records, table.mid_bytes, table.dropped_lines, table.dropped_bytes = saved
                table.gap_seq, table.dropped_records = saved_gap, saved_records
                raise
        except (OSError, DamagedLog) as error:
            log.warning("the log's oldest tail segment could not be dropped: %s", error)
            return False
        self._tail_bytes.pop(tail.k, None)
        if self._committer is None:
            table.doomed.append(tail.k)  # deleted by the _trim that called this, after the commit above
        return True

    def _commit(self, table: Table, dropped: list[int] | None = None, middle_grew: bool = False) -> int:
        """Replace ``output.segments.json`` with ``table`` (synced, renamed: ``save_table``), or
        hand it to the committer, which saves it, then deletes the ``dropped`` segments' files.
        The generation of the table (background commits; 0 otherwise)."""
        self.commits += 1
        if self._committer is not None:
            self._saved_doomed = list(table.doomed)
            return self._committer.submit(table_bytes(table), dropped or [], middle_grew)
        save_table(self._run_dir, table)
        self._saved_doomed = list(table.doomed)
        return 0

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait (at most ``timeout`` seconds) until the tables handed to the committer are saved:
        everything written so far is readable. True at once without background commits."""
        committer = self._committer
        with self._lock:
            generation = self.commits
        return committer is None or committer.wait_saved(generation, timeout, through_failures=True)

    def _delete_doomed(self, table: Table, *, commit: bool = False) -> None:
        """Delete dropped segments' files; one held open (Windows) is tried again at the next drop.

        A segment is deleted once the table that no longer lists it is committed. One that cannot
        be deleted stays in ``doomed``, which is saved with the table's next change (a rotation, a
        drop) or, with ``commit``, at once (the writer's close): a save of its own per drop would
        cost a flood one more synced table a segment. Nothing depends on the saved list: a writer
        started again deletes every tail file older than the table's oldest tail
        (``_dropped_leftovers``), and no reader opens a segment the table does not list."""
        table.doomed = delete_segments(self._run_dir, table.doomed)
        if commit and table.doomed != self._saved_doomed:
            with contextlib.suppress(OSError):
                self._commit(table)

    def _keepers(self) -> tuple[Callable[[bytes, bool], bool], Callable[[bytes], bool]]:
        """(can this chunk hold an event, is this line one): loaded at the first drop (``late_imports``)."""
        if self._keep is None:
            self._keep = late_imports.keep_filters(
                self._spec.get("progressPattern"), self._spec.get("checkpointPattern")
            )
        return self._keep

    def _try_write(self, stream: int, flags: int, data: bytes, lines: int) -> bool:
        try:
            write_all(self._log_fd, data)
            record = RECORD.pack(stream, flags, len(data), self._next_seq, self._offset, time.time())
            write_all(self._idx_fd, record)
        except OSError as error:
            self.last_error = error
            self.write_failures += 1
            with contextlib.suppress(OSError):  # undo a partial write: shrinking needs no space
                os.ftruncate(self._log_fd, self._offset)
                os.ftruncate(self._idx_fd, self._idx_size)
            return False
        self._next_seq += lines
        self._offset += len(data)
        self._idx_size += RECORD.size
        self._records += 1
        return True

    def _count_unwritten(self, data: bytes, lines: int, flags: int) -> None:
        self.unwritten_lines += lines if flags != FLAG_CONTINUED else 0
        self.unwritten_bytes += len(data)

    def close(self) -> None:
        with self._lock:
            self._close_fds(sync=True)
            if self._table is not None:
                self._delete_doomed(self._table, commit=True)
            if self._committer is not None:
                self._committer.close(CLOSE_PATIENCE)

    def _close_fds(self, *, sync: bool = False) -> None:
        for fd in (self._log_fd, self._idx_fd):
            if fd < 0:
                continue
            if sync:
                with contextlib.suppress(OSError):
                    os.fsync(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log_fd = self._idx_fd = -1


def _reason(error: OSError | None) -> str:
    if error is None:
        return "a write failed"
    return error.strerror or str(error)


def _redrawn_in_place(pending: bytearray) -> bool:
    """True when an unfinished line holds a bare ``\\r`` (one that no ``\\n`` can still follow)."""
    return len(pending) > 1 and pending.find(b"\r", 0, len(pending) - 1) >= 0


def count_recorded_lines(idx_path: Path, records: int | None = None) -> int:
    """The seq the next line gets, from the last record (an agent restarts rarely).

    With ``records``, the seq after the first ``records`` records only: a
    reader that counted the records a moment ago asks about those, not about
    records its trainer appended since.
    """
    try:
        size = idx_path.stat().st_size
    except FileNotFoundError:
        return 0
    whole = size - size % RECORD.size
    if records is not None:
        whole = min(whole, records * RECORD.size)
    if whole == 0:
        return 0
    with open(idx_path, "rb") as idx, open(idx_path.with_suffix(".log"), "rb") as log:
        idx.seek(whole - RECORD.size)
        stream, flags, length, seq, offset, _ = RECORD.unpack(idx.read(RECORD.size))
        kind = check_record(whole // RECORD.size - 1, stream, flags, length)
        log.seek(offset)
        data = log.read(length)
    if kind == FLAG_CONTINUED:
        return int(seq)
    if kind == FLAG_FINAL_PARTIAL:
        return int(seq) + 1
    return int(seq) + data.count(b"\n")


# --------------------------------------------------------------------------- the cap's helpers


def _read_spec(run_dir: Path) -> dict[str, Any]:
    """The run's ``spec.json`` as plain JSON ({} when it cannot be read: no cap from it then)."""
    try:
        spec = json.loads((run_dir / "spec.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return spec if isinstance(spec, dict) else {}
