"""The records of ``output.idx`` and a capped log's segments, read one at a time: what the
reader (``capture.OutputReader``) and the whole-log iterators (``capture_records``) share."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import attrs

from arena_ls.run.cursors import Cursor
from arena_ls.run.logsegments import (
    HEAD,
    MID,
    MID_IDX,
    MID_RECORD,
    SEGMENTS_FILE,
    Table,
)
from arena_ls.run.outputlog import (
    RECORD,
    DamagedLog,
    check_record,
    count_recorded_lines,
)


@attrs.frozen
class Segment:
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


class SegmentGone(Exception):
    """A tail segment listed a moment ago was dropped meanwhile: read the table again."""


@attrs.frozen
class Layout:
    """What a log holds now: its segments in order, and the table of a capped one (else None)."""

    table: Table | None
    segments: list[Segment]

    @property
    def last(self) -> Segment:
        return self.segments[-1]

    def segment(self, k: int) -> Segment | None:
        for segment in self.segments:
            if segment.k == k:
                return segment
        return None

    def first_tail(self) -> Segment:
        return self.segments[1]

    def locate(self, cursor: Cursor) -> tuple[Segment | None, Cursor]:
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
            return None, mid_cursor(self, cursor.seq, cursor.ident)
        if cursor.record == segment.end and segment is not self.last:
            if segment.k == HEAD:
                return None, mid_cursor(self, table.head_end_seq, cursor.ident)
            following = self.segments[self.segments.index(segment) + 1]
            return following, segment_start(following, cursor.ident)
        return segment, cursor


def mid_cursor(layout: Layout, seq: int, ident: str) -> Cursor:
    return Cursor(record=layout.first_tail().base, offset=0, seq=seq, ident=ident, segment=MID)


def segment_start(segment: Segment, ident: str) -> Cursor:
    return Cursor(record=segment.base, offset=0, seq=segment.first_seq, ident=ident, segment=segment.k)


def seq_after(segment: Segment, records: int) -> int:
    """The seq of the line after the first ``records`` records of ``segment``."""
    if records <= 0:
        return segment.first_seq
    return count_recorded_lines(segment.idx, records)


def check_position(record: int, at_offset: int, offset: int, first_seq: int, seq: int) -> None:
    """Records are contiguous: each starts where the last ended, and numbers no line beyond the next.

    A record numbering lines already passed is not damage: a tail cursor
    made while the index grew may point past a record's lines (they are skipped)."""
    if at_offset != offset:
        raise DamagedLog(f"output.idx record {record} says offset {at_offset}, but the log is at {offset}")
    if first_seq > seq:  # a gap: lines numbered past any the index has given (behind is a skip)
        raise DamagedLog(f"output.idx record {record} numbers its first line {first_seq}, expected {seq}")


def end_of(idx: BinaryIO, index: int) -> int:
    """The log offset where record ``index`` ends (0 before the first record)."""
    if index < 0:
        return 0
    _, _, length, _, start, _ = record_at(idx, index)
    return start + length


def damaged_at(idx: BinaryIO, index: int) -> bool:
    """Is record ``index`` one no writer makes, or not contiguous with the record before it?"""
    stream, flags, length, _, start, _ = record_at(idx, index)
    try:
        check_record(index, stream, flags, length)
    except DamagedLog:
        return True
    return start != end_of(idx, index - 1)


def record_at(idx: BinaryIO, index: int) -> tuple[int, int, int, int, int, float]:
    idx.seek(index * RECORD.size)
    values: tuple[int, int, int, int, int, float] = RECORD.unpack(idx.read(RECORD.size))
    return values


def records_in(idx_path: Path) -> int:
    try:
        return idx_path.stat().st_size // RECORD.size
    except OSError:
        return 0


def size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def first_time(segment: Segment) -> float:
    """The arrival time of a segment's first record (0 when it has none yet)."""
    try:
        with open(segment.idx, "rb") as idx:
            header = idx.read(RECORD.size)
    except OSError:
        return 0.0
    return float(RECORD.unpack(header)[5]) if len(header) == RECORD.size else 0.0


def mid_record(idx: BinaryIO, index: int) -> tuple[int, int, int, int, int, int, float]:
    idx.seek(index * MID_RECORD.size)
    header = idx.read(MID_RECORD.size)
    if len(header) < MID_RECORD.size:
        raise DamagedLog(f"{MID_IDX} is shorter than {SEGMENTS_FILE} says")
    values: tuple[int, int, int, int, int, int, float] = MID_RECORD.unpack(header)
    return values


def first_mid_at(idx: BinaryIO, count: int, seq: int) -> int:
    """The first middle record whose line's seq is ``seq`` or later (``count`` when none)."""
    return first_mid_where(idx, count, field=2, at_least=seq)


def first_mid_from(idx: BinaryIO, count: int, record: int) -> int:
    """The first middle record that came from global record ``record`` or later."""
    return first_mid_where(idx, count, field=3, at_least=record)


def first_mid_where(idx: BinaryIO, count: int, *, field: int, at_least: int) -> int:
    """Binary search of the middle's index (sorted by seq and by record alike) on one field."""
    low, high = 0, count
    while low < high:
        middle = (low + high) // 2
        if mid_record(idx, middle)[field] < at_least:
            low = middle + 1
        else:
            high = middle
    return low
