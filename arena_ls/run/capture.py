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

import contextlib
import os
import struct
from pathlib import Path

import attrs

from arena_ls.run import agent_records
from arena_ls.run.logsegments import (
    HEAD,
    MID,
    MID_IDX,
    MID_LOG,
    SEGMENTS_FILE,
    SegmentsDamaged,
    Table,
    gap_text,
    load_table,
    segment_paths,
    table_bytes,
)
from arena_ls.run.outputlog import (
    ARENA,
    FLAG_CONTINUED,
    FLAG_FINAL_PARTIAL,
    FLAG_LINES,
    LINE_LIMIT,
    RECORD,
    STDERR,
    STDOUT,
    STREAMS,
    DamagedLog,
    OutputWriter,
    check_record,
)

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
]

from arena_ls.run.capture_index import (
    Layout,
    Segment,
    SegmentGone,
    check_position,
    damaged_at,
    end_of,
    first_mid_at,
    first_time,
    mid_cursor,
    mid_record,
    record_at,
    records_in,
    segment_start,
    seq_after,
    size_of,
)
from arena_ls.run.cursors import MAX_OPEN_SPAN, Cursor, InvalidCursor, file_ident
from arena_ls.run.loglines import LogLine, clean_text, clean_texts


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


STALE_TABLE_TRIES = 8
"""How many times one ``layout`` reads a table that lists a segment already deleted (a flood
replaces the table several times a second; each try reads the newest)."""


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

    def _table(self, *, fresh: bool = False) -> Table | None:
        """The segment table (None: never capped), read again only when it was replaced (or
        ``fresh``: whatever its file's size and times say)."""
        try:
            stat = os.stat(self.run_dir / SEGMENTS_FILE)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise DamagedLog(f"{SEGMENTS_FILE} cannot be read: {error}") from error
        signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if not fresh and self._table_seen is not None and self._table_seen[0] == signature:
            return self._table_seen[1]
        try:
            table = load_table(self.run_dir)
        except FileNotFoundError:
            return None
        except (SegmentsDamaged, OSError) as error:
            raise DamagedLog(str(error)) from error
        self._table_seen = (signature, table)
        return table

    def layout(self) -> Layout:
        """The table and each segment's records as the files stand.

        A tail the table lists whose index is gone was dropped by a table saved since this one was
        read: the agent deletes a segment only once the table that no longer lists it is saved. Read
        as empty, it would send a cursor at its start on to the next tail, past the kept lines it
        had, now in the middle; so the table is read again, while it keeps changing. A tail still
        missing from the newest table is damage (a file deleted by hand): read as empty."""
        table = self._table()
        layout, complete = self._layout_of(table)
        for _ in range(STALE_TABLE_TRIES):
            if complete:
                break
            newer = self._table(fresh=True)
            if newer is None or table is None or table_bytes(newer) == table_bytes(table):
                break  # the newest table lists it too: missing (damage), not dropped since
            table = newer
            layout, complete = self._layout_of(table)
        return layout

    def _layout_of(self, table: Table | None) -> tuple[Layout, bool]:
        """The layout ``table`` gives, and whether every tail it lists has its index."""
        if table is None:
            head = Segment(HEAD, 0, records_in(self._idx_path), 0, self._log_path, self._idx_path)
            return Layout(None, [head]), True
        head = Segment(HEAD, 0, table.head_records, 0, self._log_path, self._idx_path)
        segments = [head]
        complete = True
        for tail in table.tails:
            log_path, idx_path = segment_paths(self.run_dir, tail.k)
            try:
                records = idx_path.stat().st_size // RECORD.size
            except FileNotFoundError:
                records, complete = 0, False
            except OSError:
                records = 0
            segments.append(Segment(tail.k, tail.base, records, tail.first_seq, log_path, idx_path))
        return Layout(table, segments), complete

    def record_count(self) -> int:
        """Records in the log (global indices: a capped log's dropped ones count)."""
        try:
            return self.layout().last.end
        except DamagedLog:
            return records_in(self._idx_path)

    def backlog_bytes(self, cursor: Cursor) -> int:
        """About how many bytes of log lie after ``cursor`` (the live view's jump rule)."""
        try:
            layout = self.layout()
        except DamagedLog:
            return 0
        segment, cursor = layout.locate(cursor)
        later = layout.segments[layout.segments.index(segment) + 1 :] if segment else layout.segments[1:]
        total = sum(size_of(part.log) for part in later)
        if segment is not None:
            total += max(0, size_of(segment.log) - cursor.offset)
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
        layout = self.layout()
        last = layout.last
        if layout.table is None and last.count == 0:
            return self.start()
        ident = file_ident(self.run_dir)
        target = max(0, seq_after(last, last.count) - keep_lines)
        for segment in reversed(layout.segments[1:]):
            if segment.first_seq <= target:
                return self._tail_in(segment, target, ident)
        if layout.table is not None and target >= layout.table.head_end_seq:
            return mid_cursor(layout, target, ident)
        return self._tail_in(layout.segments[0], target, ident)

    def _tail_in(self, segment: Segment, target: int, ident: str) -> Cursor:
        if segment.count == 0:
            return segment_start(segment, ident)
        with open(segment.idx, "rb") as idx:
            low, high = 0, segment.count - 1
            while low < high:  # the first record whose seq >= target
                mid = (low + high) // 2
                if record_at(idx, mid)[3] < target:
                    low = mid + 1
                else:
                    high = mid
            _, _, _, seq, offset, _ = record_at(idx, low)
            if seq > target and low > 0:  # the target line is inside the record before
                low -= 1
                offset = record_at(idx, low)[4]
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
            layout = self.layout()
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
            except SegmentGone:
                layout = self.layout()
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

    def _read_mid(self, layout: Layout, cursor: Cursor, limit: int) -> Page:
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
                index = first_mid_at(idx, count, seq) if count else 0
                while len(lines) < limit:
                    record = mid_record(idx, index) if index < count else None
                    next_seq = record[2] if record is not None else None
                    if gap is not None and gap >= seq and (next_seq is None or gap < next_seq):
                        at = at_gap or (record[6] if record is not None else first_time(layout.first_tail()))
                        lines.append(LogLine(gap, "arena", gap_text(table), at))
                        seq = gap + 1
                        continue
                    if record is None:
                        return Page(lines, segment_start(layout.first_tail(), cursor.ident))
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
                return Page(lines, mid_cursor(layout, seq, cursor.ident), damage=f"{MID_LOG} is missing")
            except (DamagedLog, OSError, ValueError, struct.error) as error:
                return Page(lines, mid_cursor(layout, seq, cursor.ident), damage=str(error))
        return Page(lines, mid_cursor(layout, seq, cursor.ident))

    def _read_segment(self, segment: Segment, cursor: Cursor, limit: int, max_bytes: int) -> Page:
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
                        raise SegmentGone from None
                    raise
                idx.seek((record - segment.base) * RECORD.size)
                log.seek(offset)
                while record < count and len(lines) < limit and read_bytes < max_bytes:
                    header = idx.read(RECORD.size)
                    if len(header) < RECORD.size:
                        break
                    stream, flags, length, first_seq, at_offset, at = RECORD.unpack(header)
                    check_position(record, at_offset, offset, first_seq, seq)
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
        except SegmentGone:
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
            layout = self.layout()
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

    def _check_positions(self, segment: Segment, cursor: Cursor) -> None:
        base, count = segment.base, segment.count
        local = cursor.record - base
        with open(segment.idx, "rb") as idx:
            if local < count and damaged_at(idx, local):
                # Where a read of a damaged log stops: valid if it is where the intact part ends
                # (``read`` then reports the damage again, and the lines before it stay readable).
                if cursor.offset != end_of(idx, local - 1) or cursor.open_lines:
                    raise InvalidCursor(f"its offset is not where record {cursor.record} starts in the log")
                return
            if local < count:
                _, _, _, first_seq, offset, _ = record_at(idx, local)
                last_seq = record_at(idx, local + 1)[3] if local + 1 < count else seq_after(segment, count)
            else:
                _, _, length, _, start, _ = record_at(idx, count - 1)
                offset = start + length
                first_seq = last_seq = seq_after(segment, count)
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
                rec_stream, flags, _, _, offset, _ = record_at(idx, start_record - base)
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

    def _reopen_lines(self, segment: Segment, cursor: Cursor) -> dict[int, OpenLine]:
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
    """An ``arena`` line: its record read (``agent_records``), its words rendered from it.

    The words get the hygiene of any line (a failure's evidence quotes the trainer's output:
    its escapes and carriage returns); a text with newlines inside stays one line."""
    event = agent_records.parse(stored)
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
