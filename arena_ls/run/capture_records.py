"""Whole-log readers of a run's output: every line (tools and tests), every record from an index
(the records reader, the metrics page), and the trainer lines after a marker."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from arena_ls.run.capture import OutputReader
from arena_ls.run.capture_index import Layout, Segment, SegmentGone, first_mid_from, mid_record
from arena_ls.run.loglines import LogLine
from arena_ls.run.logsegments import (
    GAP_LINE,
    HEAD,
    MID_IDX,
    MID_LOG,
)
from arena_ls.run.outputlog import (
    FLAG_LINES,
    FLAG_QUIET,
    MAX_RECORD_BYTES,
    RECORD,
    DamagedLog,
    check_record,
)


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
        layout = reader.layout()
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
        except SegmentGone as gone:
            index = int(gone.args[0])
            try:
                layout = OutputReader(run_dir).layout()
            except DamagedLog:
                return


def _iter_capped(run_dir: Path, layout: Layout, index: int, quiet_tail: QuietTail | None) -> Iterator[Record]:
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
            raise SegmentGone(max(index, segment.base)) from None
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
            number = first_mid_from(idx, count, start)
            group: tuple[int, int, float] | None = None
            data = bytearray()
            expected = 0
            while number < count:
                stream, length, seq, source, first_seq, offset, at = mid_record(idx, number)
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
    segment: Segment, start: int, end: int | None, quiet_tail: QuietTail | None = None
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
