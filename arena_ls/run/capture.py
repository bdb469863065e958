"""The captured output of a run, on disk, and how it is read back as lines.

The writing side (the format, ``OutputWriter``; the pipe pumps: ``agent.pumps``) lives in
``outputlog``, which the agent loads before anything heavy; this module is
the reading side, and re-exports the format's names.

The agent appends what the trainer writes, in large chunks, to
``output.log`` (plain bytes, readable with ``tail -f``) and one fixed-size
record per chunk to ``output.idx``. A record says which stream the chunk
came from, when it arrived, and the sequence number of its first line. The
agent only writes whole lines in a record, except for an overlong line
(over ``LINE_LIMIT`` bytes without a newline), which it writes in
continuation records so that memory stays bounded.

Because the index fixes the order and numbering of every line, any server,
at any time, reads the same lines with the same ``seq``: a cursor is just a
position in the index, valid across server restarts.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

import attrs

from arena_ls.run import supervisor_events
from arena_ls.run.logsegments import (
    GAP_LINE,
    HEAD,
    MID,
    MID_IDX,
    MID_LOG,
    MID_RECORD,
    SEGMENTS_FILE,
    SegmentsDamaged,
    Table,
    gap_text,
    load_table,
    segment_paths,
)
from arena_ls.run.outputlog import (
    ARENA,
    FLAG_CONTINUED,
    FLAG_FINAL_PARTIAL,
    FLAG_LINES,
    FLAG_QUIET,
    LINE_LIMIT,
    MAX_RECORD_BYTES,
    RECORD,
    STDERR,
    STDOUT,
    STREAMS,
    DamagedLog,
    OutputWriter,
    check_record,
    count_recorded_lines,
)
from arena_ls.run.supervisor_events import SupervisorEvent
from arena_ls.timeutil import iso_utc

__all__ = [
    "ARENA",
    "FLAG_CONTINUED",
    "FLAG_FINAL_PARTIAL",
    "FLAG_LINES",
    "LINE_LIMIT",
    "RECORD",
    "STDERR",
    "STDOUT",
    "STREAMS",
    "Cursor",
    "DamagedLog",
    "InvalidCursor",
    "LogLine",
    "OpenLine",
    "OutputReader",
    "OutputWriter",
    "Page",
    "clean_text",
    "clean_texts",
    "file_ident",
    "iter_all_lines",
    "iter_records",
]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


# --------------------------------------------------------------------------- reading


@attrs.frozen
class LogLine:
    """One line of a run's output, as the contract's ``LogLine``."""

    seq: int
    stream: str
    text: str
    at: float
    event: SupervisorEvent | None = attrs.field(default=None, eq=False)
    """On the ``arena`` stream, the supervisor's record (``text`` is its words); else None."""

    def to_wire(self) -> dict[str, object]:
        return {"seq": self.seq, "stream": self.stream, "text": self.text, "at": iso_utc(self.at)}


def clean_text(raw: bytes, length: int | None = None) -> str:
    """Hygiene for one line: CR progress collapsed, ANSI removed, bad bytes replaced, cut.

    ``length`` is the line's real length when ``raw`` holds only its kept
    beginning (an overlong line), so the cut note gives the true count.
    """
    if raw.endswith(b"\r"):
        raw = raw.rstrip(b"\r")
    if b"\r" in raw:
        parts = [part for part in raw.split(b"\r") if part.strip()]
        raw = parts[-1] if parts else b""
    cut = len(raw) > LINE_LIMIT
    text = raw[:LINE_LIMIT].decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    text = _CONTROL.sub("", text)
    if cut:
        dropped = max(len(raw), length or 0) - LINE_LIMIT
        text += f" … [line cut: {dropped} more bytes in the log file]"
    return text


def clean_texts(raws: list[bytes]) -> list[str]:
    """``clean_text`` of many lines, in one decode and one pass where that gives the same text.

    Lines of plain text (no CR, no escape, not overlong: nearly all of them)
    are decoded and stripped of control characters together; the others go
    through ``clean_text`` one by one. A newline never occurs inside a UTF-8
    sequence, so decoding them joined replaces the same bytes.
    """
    if not raws:
        return []
    blob = b"\n".join(raws)
    if b"\r" in blob or b"\x1b" in blob or (len(blob) > LINE_LIMIT and max(map(len, raws)) > LINE_LIMIT):
        return [clean_text(raw) for raw in raws]
    text = blob.decode("utf-8", "replace")
    return _CONTROL.sub("", text).split("\n")


@attrs.define
class Cursor:
    """A position in the index; opaque to clients, stable across restarts.

    ``open_lines`` maps a stream to the record where its overlong, still
    unfinished line began, so that reading can resume in the middle of it.
    ``ident`` names the log file, so that a truncated or replaced file is
    detected instead of silently skipping or repeating lines.
    """

    record: int = 0
    offset: int = 0
    seq: int = 0
    open_lines: dict[int, tuple[int, int]] = attrs.field(factory=dict)
    ident: str = ""
    segment: int = HEAD
    """Which file of a capped log (``logsegments``): the head, a tail segment, or the middle.
    ``record`` is always the global index; ``offset`` is in the segment's own log."""

    def encode(self) -> str:
        payload: dict[str, object] = {
            "r": self.record,
            "o": self.offset,
            "s": self.seq,
            "p": {str(k): list(v) for k, v in self.open_lines.items()},
            "i": self.ident,
        }
        if self.segment != HEAD:
            payload["g"] = self.segment
        return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        """Parse a cursor; ``InvalidCursor`` when it is not one of ours.

        Checked for shape only (size, entries, integers in range); whether
        its positions are real positions of a log is ``OutputReader.check_cursor``'s.
        """
        if len(token) > MAX_CURSOR_CHARS:
            raise InvalidCursor(f"too long ({len(token)} characters) to be an arena/logs cursor")
        try:
            padded = token + "=" * (-len(token) % 4)
            payload = json.loads(base64.urlsafe_b64decode(padded.encode()))
            entries = payload["p"].items()
            if len(entries) > len(STREAMS):
                raise InvalidCursor(f"{len(entries)} open lines: a log has {len(STREAMS)} streams")
            open_lines = {_small(k, len(STREAMS) - 1): (_small(v[0]), _small(v[1])) for k, v in entries}
            cursor = cls(
                record=_small(payload["r"]),
                offset=_small(payload["o"]),
                seq=_small(payload["s"]),
                open_lines=open_lines,
                ident=str(payload.get("i", ""))[:100],
                segment=_small(payload.get("g", HEAD), MID),
            )
        except InvalidCursor:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
            raise InvalidCursor("not a valid arena/logs cursor") from error
        return cursor


MAX_CURSOR_CHARS = 4096
MAX_OPEN_SPAN = 100_000
"""Records an unfinished line may span in a cursor (a forged span would make a read walk them all)."""


class InvalidCursor(ValueError):
    """A cursor that this server cannot have made (forged or damaged): -32602."""


def _small(value: object, most: int = 2**62) -> int:
    """A cursor's integer: an int (or its decimal string, for the stream keys) from 0 to ``most``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidCursor("not a valid arena/logs cursor")
    if isinstance(value, str) and not (value.isdigit() and len(value) < 20):
        raise InvalidCursor("not a valid arena/logs cursor")
    number = int(value)
    if not 0 <= number <= most:
        raise InvalidCursor("a position in the cursor is out of range")
    return number


def file_ident(run_dir: Path) -> str:
    """Identity of a run's log: the inode and first record's time (survives appends)."""
    idx = run_dir / "output.idx"
    try:
        stat = idx.stat()
        with open(idx, "rb") as handle:
            head = handle.read(RECORD.size)
    except OSError:
        return ""
    if len(head) < RECORD.size:
        return ""  # no record yet: named by the first one (a cursor made now is checked from then on)
    return f"{stat.st_ino}:{RECORD.unpack(head)[5]:.6f}"


@attrs.frozen
class Page:
    """Lines read from a cursor, and the cursor after them."""

    lines: list[LogLine]
    cursor: Cursor
    reset: str | None = None
    """Set when the log was truncated or replaced since the cursor was made."""
    updates: list[LogLine] = attrs.field(factory=list)
    """The latest state of unfinished lines redrawn in place (for live progress; seq -1)."""
    damage: str | None = None
    """Set when reading stopped at damage (the lines before it are in ``lines``)."""


@attrs.frozen
class _Segment:
    """One file pair of a log: the head (``k`` 0) or a tail segment, and the records it holds."""

    k: int
    base: int
    """The global index of its first record."""
    count: int
    first_seq: int
    log: Path
    idx: Path

    @property
    def end(self) -> int:
        return self.base + self.count


class _SegmentGone(Exception):
    """A tail segment listed a moment ago was dropped meanwhile: read the table again."""


@attrs.frozen
class _Layout:
    """What a log holds now: its segments in order, and the table of a capped one (else None)."""

    table: Table | None
    segments: list[_Segment]

    @property
    def last(self) -> _Segment:
        return self.segments[-1]

    def segment(self, k: int) -> _Segment | None:
        for segment in self.segments:
            if segment.k == k:
                return segment
        return None

    def first_tail(self) -> _Segment:
        return self.segments[1]

    def locate(self, cursor: Cursor) -> tuple[_Segment | None, Cursor]:
        """Where ``cursor`` reads now: its segment (None: the middle), moved on past an ended one.

        A cursor into a tail segment that was dropped since reads the middle
        from its line on: the kept lines it has not read, then the gap line."""
        table = self.table
        if table is None:
            return (self.segments[0], cursor) if cursor.segment == HEAD else (None, cursor)
        if cursor.segment == MID:
            return None, cursor
        segment = self.segment(cursor.segment)
        if segment is None:  # dropped since (or forged: check_cursor refuses those)
            return None, _mid_cursor(self, cursor.seq, cursor.ident)
        if cursor.record == segment.end and segment is not self.last:
            if segment.k == HEAD:
                return None, _mid_cursor(self, table.head_end_seq, cursor.ident)
            following = self.segments[self.segments.index(segment) + 1]
            return following, _segment_start(following, cursor.ident)
        return segment, cursor


def _mid_cursor(layout: _Layout, seq: int, ident: str) -> Cursor:
    return Cursor(record=layout.first_tail().base, offset=0, seq=seq, ident=ident, segment=MID)


def _segment_start(segment: _Segment, ident: str) -> Cursor:
    return Cursor(record=segment.base, offset=0, seq=segment.first_seq, ident=ident, segment=segment.k)


def _seq_after(segment: _Segment, records: int) -> int:
    """The seq of the line after the first ``records`` records of ``segment``."""
    if records <= 0:
        return segment.first_seq
    return count_recorded_lines(segment.idx, records)


class OutputReader:
    """Server side: reads a run's lines from disk from any cursor.

    A capped log (``logsegments``) is read head, middle, tails, as one: a
    cursor names its segment, and one that points into a segment dropped
    since reads on in the middle by its seq (never an error, never a line
    twice, never a kept line skipped)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._idx_path = run_dir / "output.idx"
        self._log_path = run_dir / "output.log"
        self._table_seen: tuple[tuple[int, int, int], Table | None] | None = None

    # -- the layout ----------------------------------------------------------------------

    def _table(self) -> Table | None:
        """The segment table (None: never capped), read again only when it was replaced."""
        try:
            stat = os.stat(self.run_dir / SEGMENTS_FILE)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DamagedLog(f"{SEGMENTS_FILE} cannot be read: {error}") from error
        signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if self._table_seen is not None and self._table_seen[0] == signature:
            return self._table_seen[1]
        try:
            table = load_table(self.run_dir)
        except FileNotFoundError:
            return None
        except (SegmentsDamaged, OSError) as error:
            raise DamagedLog(str(error)) from error
        self._table_seen = (signature, table)
        return table

    def _layout(self) -> _Layout:
        table = self._table()
        if table is None:
            head = _Segment(HEAD, 0, _records_in(self._idx_path), 0, self._log_path, self._idx_path)
            return _Layout(None, [head])
        head = _Segment(HEAD, 0, table.head_records, 0, self._log_path, self._idx_path)
        segments = [head]
        for tail in table.tails:
            log_path, idx_path = segment_paths(self.run_dir, tail.k)
            segments.append(
                _Segment(tail.k, tail.base, _records_in(idx_path), tail.first_seq, log_path, idx_path)
            )
        return _Layout(table, segments)

    def record_count(self) -> int:
        """Records in the log (global indices: a capped log's dropped ones count)."""
        try:
            return self._layout().last.end
        except DamagedLog:
            return _records_in(self._idx_path)

    def backlog_bytes(self, cursor: Cursor) -> int:
        """About how many bytes of log lie after ``cursor`` (the live view's jump rule)."""
        try:
            layout = self._layout()
        except DamagedLog:
            return 0
        segment, cursor = layout.locate(cursor)
        later = layout.segments[layout.segments.index(segment) + 1 :] if segment else layout.segments[1:]
        total = sum(_size_of(part.log) for part in later)
        if segment is not None:
            total += max(0, _size_of(segment.log) - cursor.offset)
        return total

    def start(self) -> Cursor:
        return Cursor(ident=file_ident(self.run_dir))

    # -- tail ----------------------------------------------------------------------------

    def tail_cursor(self, keep_lines: int) -> Cursor:
        """A cursor ``keep_lines`` lines before the end (or at the start of a shorter log).

        Records partition the line numbers in order, so the record holding
        the target line is found by a binary search on the first ``seq`` of
        each; the cursor then points at that line inside it. In a capped log
        the target is looked for in the tails, newest first, then the middle
        (whose kept lines read from there), then the head.
        """
        layout = self._layout()
        last = layout.last
        if layout.table is None and last.count == 0:
            return self.start()
        ident = file_ident(self.run_dir)
        target = max(0, _seq_after(last, last.count) - keep_lines)
        for segment in reversed(layout.segments[1:]):
            if segment.first_seq <= target:
                return self._tail_in(segment, target, ident)
        if layout.table is not None and target >= layout.table.head_end_seq:
            return _mid_cursor(layout, target, ident)
        return self._tail_in(layout.segments[0], target, ident)

    def _tail_in(self, segment: _Segment, target: int, ident: str) -> Cursor:
        if segment.count == 0:
            return _segment_start(segment, ident)
        with open(segment.idx, "rb") as idx:
            low, high = 0, segment.count - 1
            while low < high:  # the first record whose seq >= target
                mid = (low + high) // 2
                if _record_at(idx, mid)[3] < target:
                    low = mid + 1
                else:
                    high = mid
            _, _, _, seq, offset, _ = _record_at(idx, low)
            if seq > target and low > 0:  # the target line is inside the record before
                low -= 1
                offset = _record_at(idx, low)[4]
        # At a record's first line, the first of the records that share that seq:
        # an overlong line is then read from its beginning, never from its middle.
        target = max(target, segment.first_seq)
        return Cursor(record=segment.base + low, offset=offset, seq=target, ident=ident, segment=segment.k)

    # -- reading -------------------------------------------------------------------------

    def read(self, cursor: Cursor, limit: int, max_bytes: int = 8 << 20) -> Page:
        """Up to ``limit`` complete lines after ``cursor``, and the next cursor."""
        reset = self._check_ident(cursor)
        if reset is not None:
            cursor = self.start()
        lines: list[LogLine] = []
        updates: list[LogLine] = []
        read_bytes = 0
        position = cursor
        try:
            layout = self._layout()
        except DamagedLog as error:
            return Page([], cursor, reset, [], str(error))
        for _ in range(2 * len(layout.segments) + 8):  # each hop moves on a segment, or reads the table again
            segment, position = layout.locate(position)
            if segment is None and layout.table is None:
                return Page([], self.start(), reset or "the log has no such segment (replaced)")
            if segment is not None and position.record > segment.end:
                return Page([], self.start(), reset="the log is shorter than the cursor (truncated)")
            try:
                if segment is None:
                    part = self._read_mid(layout, position, limit - len(lines))
                else:
                    part = self._read_segment(segment, position, limit - len(lines), max_bytes - read_bytes)
            except _SegmentGone:
                layout = self._layout()
                continue
            lines.extend(part.lines)
            updates.extend(part.updates)
            read_bytes += sum(len(line.text) for line in part.lines)
            if part.damage is not None:
                return Page(lines, part.cursor, reset, updates, part.damage)
            _, moved = layout.locate(part.cursor)
            done = moved == part.cursor and part.cursor.segment == position.segment
            position = moved
            if len(lines) >= limit or read_bytes >= max_bytes or done:
                break
        return Page(lines, position, reset, updates)

    def _read_mid(self, layout: _Layout, cursor: Cursor, limit: int) -> Page:
        """The middle's kept lines (and the gap line) from ``cursor.seq`` on; then the first tail."""
        table = layout.table
        assert table is not None
        lines: list[LogLine] = []
        seq = cursor.seq
        gap = table.gap_seq
        count = table.mid_records
        at_gap = 0.0
        with contextlib.ExitStack() as stack:
            try:
                if count:
                    idx = stack.enter_context(open(self.run_dir / MID_IDX, "rb"))
                    log = stack.enter_context(open(self.run_dir / MID_LOG, "rb"))
                index = _first_mid_at(idx, count, seq) if count else 0
                while len(lines) < limit:
                    record = _mid_record(idx, index) if index < count else None
                    next_seq = record[2] if record is not None else None
                    if gap is not None and gap >= seq and (next_seq is None or gap < next_seq):
                        at = at_gap or (record[6] if record is not None else _first_time(layout.first_tail()))
                        lines.append(LogLine(gap, "arena", gap_text(table), at))
                        seq = gap + 1
                        continue
                    if record is None:
                        return Page(lines, _segment_start(layout.first_tail(), cursor.ident))
                    stream, length, line_seq, _, _, offset, at = record
                    log.seek(offset)
                    data = log.read(length)
                    if len(data) < length:
                        raise DamagedLog(f"{MID_IDX} record {index} points past the end of {MID_LOG}")
                    name = STREAMS[stream] if stream < len(STREAMS) else "arena"
                    text = clean_text(data.rstrip(b"\n"))
                    kept = _supervisor_line(line_seq, text, at) if name == "arena" else None
                    lines.append(kept or LogLine(line_seq, name, text, at))
                    at_gap = at
                    seq = line_seq + 1
                    index += 1
            except FileNotFoundError:
                return Page(lines, _mid_cursor(layout, seq, cursor.ident), damage=f"{MID_LOG} is missing")
            except (DamagedLog, OSError, ValueError, struct.error) as error:
                return Page(lines, _mid_cursor(layout, seq, cursor.ident), damage=str(error))
        return Page(lines, _mid_cursor(layout, seq, cursor.ident))

    def _read_segment(self, segment: _Segment, cursor: Cursor, limit: int, max_bytes: int) -> Page:
        """Up to ``limit`` lines of one file pair from ``cursor`` (the format's reader)."""
        count = segment.end
        if count == cursor.record:
            return Page([], cursor)
        lines: list[LogLine] = []
        updates: list[LogLine] = []
        damage: str | None = None
        record, offset, seq = cursor.record, cursor.offset, cursor.seq
        open_starts = dict(cursor.open_lines)
        read_bytes = 0
        try:
            open_parts = self._reopen_lines(segment, cursor)
            with contextlib.ExitStack() as stack:
                try:
                    idx = stack.enter_context(open(segment.idx, "rb"))
                    log = stack.enter_context(open(segment.log, "rb"))
                except FileNotFoundError:
                    if segment.k != HEAD:
                        raise _SegmentGone from None
                    raise
                idx.seek((record - segment.base) * RECORD.size)
                log.seek(offset)
                while record < count and len(lines) < limit and read_bytes < max_bytes:
                    header = idx.read(RECORD.size)
                    if len(header) < RECORD.size:
                        break
                    stream, flags, length, first_seq, at_offset, at = RECORD.unpack(header)
                    _check_position(record, at_offset, offset, first_seq, seq)
                    kind = check_record(record, stream, flags, length)
                    data = log.read(length)
                    if len(data) < length:
                        raise DamagedLog(
                            f"{segment.idx.name} record {record} points past the end of {segment.log.name}"
                        )
                    skip = max(0, seq - first_seq)
                    room = limit - len(lines)
                    total, fresh = self._lines_of(stream, kind, data, first_seq, at, open_parts, skip, room)
                    if kind == FLAG_CONTINUED and b"\r" in data:
                        updates.append(LogLine(-1, STREAMS[stream], clean_text(data), at))
                    if total - skip > room:  # stop inside this record; seq says where
                        lines.extend(fresh)
                        seq = first_seq + skip + room
                        break
                    if kind == FLAG_CONTINUED:
                        open_starts.setdefault(stream, (record, offset))
                    else:
                        open_starts.pop(stream, None)
                    lines.extend(fresh)
                    read_bytes += length
                    record += 1
                    offset += length
                    seq = max(seq, first_seq + total)
        except _SegmentGone:
            raise
        except DamagedLog as error:
            damage = str(error)
        except FileNotFoundError as error:
            damage = f"{Path(error.filename or segment.log).name} is missing"
        except (OSError, ValueError, struct.error) as error:
            damage = f"the run's output cannot be read: {error}"
        ident = cursor.ident or file_ident(self.run_dir)
        next_cursor = Cursor(record, offset, seq, open_starts, ident, segment.k)
        return Page(lines, next_cursor, None, updates, damage)

    # -- checking ------------------------------------------------------------------------

    def check_cursor(self, cursor: Cursor) -> None:
        """Raise ``InvalidCursor`` unless ``cursor`` is a position a read of this log gives.

        Its offset must be where its record starts in the log, its seq inside
        that record's lines, and each unfinished line must start at a
        continued record of its stream. A cursor of a log that was since
        truncated or replaced is not checked here: ``read`` restarts it. A
        cursor into a segment dropped since is valid while its seq lies in
        the dropped part (``read`` goes on in the middle).
        """
        if self._check_ident(cursor) is not None:
            return
        try:
            layout = self._layout()
        except DamagedLog:
            return  # ``read`` reports it
        table = layout.table
        segment = layout.segment(cursor.segment)
        if segment is None:
            if table is None:
                raise InvalidCursor("it points into a segment this log does not have")
            if cursor.segment != MID and not HEAD < cursor.segment < table.oldest.k:
                raise InvalidCursor("it points into a segment this log does not have")
            if not table.head_end_seq <= cursor.seq <= table.oldest.first_seq or cursor.open_lines:
                raise InvalidCursor("its line number is not inside the log's dropped middle")
            return
        if cursor.record > segment.end:
            return
        if cursor.record < segment.base:
            raise InvalidCursor(f"record {cursor.record} is not in the segment it names")
        if segment.count == 0:
            if (cursor.offset, cursor.seq) != (0, segment.first_seq) or cursor.open_lines:
                raise InvalidCursor("it points into a log that is still empty")
            return
        try:
            self._check_positions(segment, cursor)
        except OSError:
            return  # the log went away meanwhile: ``read`` says so

    def _check_positions(self, segment: _Segment, cursor: Cursor) -> None:
        base, count = segment.base, segment.count
        local = cursor.record - base
        with open(segment.idx, "rb") as idx:
            if local < count and _damaged_at(idx, local):
                # Where a read of a damaged log stops: valid if it is where the intact part ends
                # (``read`` then reports the damage again, and the lines before it stay readable).
                if cursor.offset != _end_of(idx, local - 1) or cursor.open_lines:
                    raise InvalidCursor(f"its offset is not where record {cursor.record} starts in the log")
                return
            if local < count:
                _, _, _, first_seq, offset, _ = _record_at(idx, local)
                last_seq = _record_at(idx, local + 1)[3] if local + 1 < count else _seq_after(segment, count)
            else:
                _, _, length, _, start, _ = _record_at(idx, count - 1)
                offset = start + length
                first_seq = last_seq = _seq_after(segment, count)
            if cursor.offset != offset:
                raise InvalidCursor(f"its offset is not where record {cursor.record} starts in the log")
            if not first_seq <= cursor.seq <= last_seq:
                raise InvalidCursor(f"its line number is not inside record {cursor.record}")
            for stream, (start_record, start_offset) in cursor.open_lines.items():
                if (
                    not 0 <= cursor.record - start_record <= MAX_OPEN_SPAN
                    or not base <= start_record < base + count
                ):
                    raise InvalidCursor("an unfinished line in it starts at no record of this log")
                rec_stream, flags, _, _, offset, _ = _record_at(idx, start_record - base)
                if (rec_stream, flags, offset) != (stream, FLAG_CONTINUED, start_offset):
                    raise InvalidCursor("an unfinished line in it does not start where the log has one")

    def _check_ident(self, cursor: Cursor) -> str | None:
        if not cursor.ident or (cursor.record == 0 and cursor.segment == HEAD):
            return None
        current = file_ident(self.run_dir)
        if current and current != cursor.ident:
            return "the log file was truncated or replaced since this cursor was made; reading from its start"
        if cursor.segment != HEAD:
            return None
        try:
            size = self._log_path.stat().st_size
        except OSError:
            return None
        if size < cursor.offset:
            return "the log file was truncated or replaced since this cursor was made; reading from its start"
        return None

    def _reopen_lines(self, segment: _Segment, cursor: Cursor) -> dict[int, OpenLine]:
        """Rebuild the unfinished overlong lines a cursor points into (within its segment)."""
        parts: dict[int, OpenLine] = {}
        if not cursor.open_lines:
            return parts
        with open(segment.idx, "rb") as idx, open(segment.log, "rb") as log:
            for stream, (start_record, start_offset) in cursor.open_lines.items():
                buffer = OpenLine()
                idx.seek((start_record - segment.base) * RECORD.size)
                offset = start_offset
                for _ in range(start_record, cursor.record):
                    rec_stream, _, length, _, _, _ = RECORD.unpack(idx.read(RECORD.size))
                    if rec_stream == stream:
                        log.seek(offset)
                        buffer.add(log.read(length))
                    offset += length
                parts[stream] = buffer
        return parts

    @staticmethod
    def _lines_of(
        stream: int,
        kind: int,
        data: bytes,
        first_seq: int,
        at: float,
        open_parts: dict[int, OpenLine],
        skip: int,
        most: int,
    ) -> tuple[int, list[LogLine]]:
        """(how many lines the record ends, its lines ``skip`` to ``skip + most``).

        Only the lines asked for are cleaned: a record can hold a megabyte of
        a flood, of which a tail read wants the last few hundred lines.
        """
        name = STREAMS[stream] if stream < len(STREAMS) else "arena"
        if kind == FLAG_CONTINUED:
            open_parts.setdefault(stream, OpenLine()).add(data)
            return 0, []
        raws = data.split(b"\n")
        if kind == FLAG_LINES:
            raws.pop()  # the empty piece after the last newline
        head = open_parts.pop(stream, None)
        head_length = None
        if head is not None and raws and skip == 0:
            head.add(raws[0])
            head_length = head.total
            raws[0] = bytes(head.kept)
        wanted = raws[skip : skip + most]
        if head_length is not None:
            texts = [clean_text(wanted[0], head_length), *clean_texts(wanted[1:])]
        else:
            texts = clean_texts(wanted)
        if stream == ARENA:
            return len(raws), [
                _supervisor_line(first_seq + skip + i, text, at) for i, text in enumerate(texts)
            ]
        return len(raws), [
            LogLine(seq=first_seq + skip + i, stream=name, text=text, at=at) for i, text in enumerate(texts)
        ]


def _supervisor_line(seq: int, stored: str, at: float) -> LogLine:
    """An ``arena`` line: its record read (``supervisor_events``), its words rendered from it.

    The words get the hygiene of any line (a failure's evidence quotes the trainer's output:
    its escapes and carriage returns); a text with newlines inside stays one line."""
    event = supervisor_events.parse(stored)
    text = stored if event.legacy is not None else clean_text(event.render().encode("utf-8", "replace"))
    return LogLine(seq=seq, stream="arena", text=text, at=at, event=event)


@attrs.define
class OpenLine:
    """An overlong line being reassembled: its kept beginning and its true length."""

    kept: bytearray = attrs.field(factory=bytearray)
    total: int = 0

    def add(self, data: bytes) -> None:
        """Grow the line, keeping its latest CR state, bounded to just over the cut."""
        self.total += len(data)
        if b"\r" in data:
            tail = data.rsplit(b"\r", 1)[1]
            if tail:
                self.kept.clear()
                data = tail
        room = LINE_LIMIT + 1 - len(self.kept)
        if room > 0:
            self.kept += data[:room]


def _check_position(record: int, at_offset: int, offset: int, first_seq: int, seq: int) -> None:
    """Records are contiguous: each starts where the last ended, and numbers no line beyond the next.

    A record numbering lines already passed is not damage: a tail cursor
    made while the index grew may point past a record's lines (they are skipped)."""
    if at_offset != offset:
        raise DamagedLog(f"output.idx record {record} says offset {at_offset}, but the log is at {offset}")
    if first_seq > seq:  # a gap: lines numbered past any the index has given (behind is a skip)
        raise DamagedLog(f"output.idx record {record} numbers its first line {first_seq}, expected {seq}")


def _end_of(idx: BinaryIO, index: int) -> int:
    """The log offset where record ``index`` ends (0 before the first record)."""
    if index < 0:
        return 0
    _, _, length, _, start, _ = _record_at(idx, index)
    return start + length


def _damaged_at(idx: BinaryIO, index: int) -> bool:
    """Is record ``index`` one no writer makes, or not contiguous with the record before it?"""
    stream, flags, length, _, start, _ = _record_at(idx, index)
    try:
        check_record(index, stream, flags, length)
    except DamagedLog:
        return True
    return start != _end_of(idx, index - 1)


def _record_at(idx: BinaryIO, index: int) -> tuple[int, int, int, int, int, float]:
    idx.seek(index * RECORD.size)
    values: tuple[int, int, int, int, int, float] = RECORD.unpack(idx.read(RECORD.size))
    return values


def _records_in(idx_path: Path) -> int:
    try:
        return idx_path.stat().st_size // RECORD.size
    except OSError:
        return 0


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _first_time(segment: _Segment) -> float:
    """The arrival time of a segment's first record (0 when it has none yet)."""
    try:
        with open(segment.idx, "rb") as idx:
            header = idx.read(RECORD.size)
    except OSError:
        return 0.0
    return float(RECORD.unpack(header)[5]) if len(header) == RECORD.size else 0.0


def _mid_record(idx: BinaryIO, index: int) -> tuple[int, int, int, int, int, int, float]:
    idx.seek(index * MID_RECORD.size)
    header = idx.read(MID_RECORD.size)
    if len(header) < MID_RECORD.size:
        raise DamagedLog(f"{MID_IDX} is shorter than {SEGMENTS_FILE} says")
    values: tuple[int, int, int, int, int, int, float] = MID_RECORD.unpack(header)
    return values


def _first_mid_at(idx: BinaryIO, count: int, seq: int) -> int:
    """The first middle record whose line's seq is ``seq`` or later (``count`` when none)."""
    return _first_mid_where(idx, count, field=2, at_least=seq)


def _first_mid_from(idx: BinaryIO, count: int, record: int) -> int:
    """The first middle record that came from global record ``record`` or later."""
    return _first_mid_where(idx, count, field=3, at_least=record)


def _first_mid_where(idx: BinaryIO, count: int, *, field: int, at_least: int) -> int:
    """Binary search of the middle's index (sorted by seq and by record alike) on one field."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if _mid_record(idx, middle)[field] < at_least:
            low = middle + 1
        else:
            high = middle
    return low


def iter_all_lines(run_dir: Path, batch: int = 5000) -> Iterator[LogLine]:
    """Every line of a run, in order (for tests and tools)."""
    reader = OutputReader(run_dir)
    cursor = reader.start()
    while True:
        page = reader.read(cursor, batch)
        yield from page.lines
        if not page.lines and page.cursor == cursor:
            return
        if page.damage is not None:
            return
        cursor = page.cursor


def trainer_lines_after(run_dir: Path, is_marker: Callable[[LogLine], bool]) -> int:
    """How many trainer lines (not ``arena``) the log holds after its last ``arena`` line that
    ``is_marker`` (all of them without one), counting those a capped log dropped (by their seqs)."""
    marker_seq = -1
    own_after = 0
    end = 0
    for line in iter_all_lines(run_dir):
        end = line.seq + 1
        if line.stream != "arena" or GAP_LINE.match(line.text):
            continue  # the gap line stands for trainer lines that were dropped
        if is_marker(line):
            marker_seq, own_after = line.seq, 0
        else:
            own_after += 1
    return max(0, end - marker_seq - 1 - own_after)


Record = tuple[int, int, int, bytes, float]
QuietTail = Callable[[int], int]
"""A record's index -> how many of its last bytes a reader of a quiet record wants."""
QUIET_LOOKBACK = 4096
"""How far before a quiet record's tail ``_quiet_lines`` looks for the start of the line across it."""


def iter_records(run_dir: Path, start: int = 0, quiet_tail: QuietTail | None = None) -> Iterator[Record]:
    """(index, stream, flags, data, time) of each record from ``start`` (for scanners); the flags
    as written (``FLAG_QUIET`` included: what a record's kind is, ``check_record`` says).

    ``quiet_tail``: of a quiet record (``FLAG_QUIET``), only the lines that start in its last
    ``quiet_tail(index)`` bytes and the one across that point are read (``_quiet_lines``): all
    that ``EventParser.parse_quiet`` looks at, and a flood's megabyte is not read for it.

    Stops at the first damaged record, and never reads more than a record can hold.
    In a capped log the records of the dropped middle come as their kept lines
    (each at its own line number in the record: the lines dropped are empty), so
    a position (record, line) means the same before and after the drop."""
    reader = OutputReader(run_dir)
    try:
        layout = reader._layout()
    except DamagedLog:
        return
    if layout.table is None:
        yield from _iter_file(layout.segments[0], start, None, quiet_tail)
        return
    index = start
    head = layout.segments[0]
    if index < head.end:
        for item in _iter_file(head, index, head.end, quiet_tail):
            index = item[0] + 1
            yield item
        if index < head.end:
            return  # damaged
    for _ in range(64):  # a tail dropped while it was read: the table again, from where we are
        try:
            yield from _iter_capped(run_dir, layout, index, quiet_tail)
            return
        except _SegmentGone as gone:
            index = int(gone.args[0])
            try:
                layout = OutputReader(run_dir)._layout()
            except DamagedLog:
                return


def _iter_capped(
    run_dir: Path, layout: _Layout, index: int, quiet_tail: QuietTail | None
) -> Iterator[Record]:
    table = layout.table
    assert table is not None
    first_tail = layout.first_tail()
    if index < first_tail.base and table.mid_records:
        for item in _iter_mid(run_dir, table.mid_records, index):
            index = item[0] + 1
            yield item
    for segment in layout.segments[1:]:
        if index >= segment.end and segment is not layout.last:
            continue
        begin = max(index, segment.base)
        try:
            end = None if segment is layout.last else segment.end
            for item in _iter_file(segment, begin, end, quiet_tail):
                index = item[0] + 1
                yield item
        except FileNotFoundError:
            raise _SegmentGone(max(index, segment.base)) from None
        if segment is not layout.last and index < segment.end:
            return  # damaged


def _iter_mid(run_dir: Path, count: int, start: int) -> Iterator[Record]:
    """The middle's lines, grouped back into the records they came from (empty lines for the dropped)."""
    with contextlib.ExitStack() as stack:
        try:
            idx = stack.enter_context(open(run_dir / MID_IDX, "rb"))
            log = stack.enter_context(open(run_dir / MID_LOG, "rb"))
        except FileNotFoundError:
            return
        try:
            number = _first_mid_from(idx, count, start)
            group: tuple[int, int, float] | None = None
            data = bytearray()
            expected = 0
            while number < count:
                stream, length, seq, source, first_seq, offset, at = _mid_record(idx, number)
                if group is not None and source != group[0]:
                    yield group[0], group[1], FLAG_LINES, bytes(data), group[2]
                    group = None
                if group is None:
                    group, data, expected = (source, stream, at), bytearray(), 0
                line_number = seq - first_seq
                data += b"\n" * max(0, line_number - expected)
                log.seek(offset)
                data += log.read(min(length, MAX_RECORD_BYTES))
                expected = line_number + 1
                number += 1
            if group is not None:
                yield group[0], group[1], FLAG_LINES, bytes(data), group[2]
        except (DamagedLog, struct.error, OSError):
            return


def _iter_file(
    segment: _Segment, start: int, end: int | None, quiet_tail: QuietTail | None = None
) -> Iterator[Record]:
    """The records of one file pair from global index ``start`` (to ``end``, else its end)."""
    with contextlib.ExitStack() as stack:
        try:
            idx = stack.enter_context(open(segment.idx, "rb"))
            log = stack.enter_context(open(segment.log, "rb"))
        except FileNotFoundError:
            if segment.k != HEAD:
                raise
            return
        idx.seek((start - segment.base) * RECORD.size)
        index = start
        while True:
            block = idx.read(RECORD.size * 4096)
            usable = len(block) - len(block) % RECORD.size
            if usable == 0:
                return
            for stream, flags, length, _, offset, at in RECORD.iter_unpack(block[:usable]):
                if end is not None and index >= end:
                    return
                try:
                    check_record(index, stream, flags, length)
                except DamagedLog:
                    return  # damaged from here on: the records before it are all there is
                if quiet_tail is not None and flags & FLAG_QUIET:
                    data = _quiet_lines(log, offset, length, quiet_tail(index))
                else:
                    data = _whole(log, offset, length)
                if data is None:
                    return  # the log ends before the record does
                yield index, stream, flags, data, at
                index += 1
            if usable < len(block) or len(block) < RECORD.size * 4096:
                return


def _whole(log: BinaryIO, offset: int, length: int) -> bytes | None:
    """A record's bytes; None when the log ends before the record does."""
    log.seek(offset)
    data = log.read(length)
    return data if len(data) == length else None


def _quiet_lines(log: BinaryIO, offset: int, length: int, tail: int) -> bytes | None:
    """The end of a quiet record that ``EventParser.parse_quiet`` reads: the lines that start in its
    last ``tail`` bytes and the one across that point (the whole record when that line is longer
    than ``QUIET_LOOKBACK``, or the record is short); None when the log ends before the record does."""
    start = length - tail - QUIET_LOOKBACK
    if start <= 0:
        return _whole(log, offset, length)
    log.seek(offset + start)
    window = log.read(length - start)
    if len(window) < length - start:
        return None
    line_start = window.rfind(b"\n", 0, QUIET_LOOKBACK)
    if line_start < 0:  # a line longer than the look back crosses the tail: the whole record
        return _whole(log, offset, length)
    return window[line_start + 1 :]
