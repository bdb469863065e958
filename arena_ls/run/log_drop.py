"""Dropping a capped log's oldest tail segment (``logs.maxRunMb``, contract 7.1): what it keeps
(every ``arena`` line and every event, appended to the middle) and what it counts as dropped.

Standard library only (the agent's writer uses it).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from pathlib import Path

from arena_ls.run.log_record import (
    ARENA,
    FLAG_CONTINUED,
    FLAG_FINAL_PARTIAL,
    FLAG_INERT,
    FLAG_LINES,
    FLAG_QUIET,
    RECORD,
    check_record,
    write_all,
)
from arena_ls.run.logsegments import MID_IDX, MID_LOG, MID_RECORD, Table, Tail, segment_paths

TAIL_FILE = re.compile(r"output\.t(\d{1,9})\.(?:log|idx)")


def dropped_leftovers(run_dir: Path, table: Table) -> list[int]:
    """The tail segments older than ``table``'s oldest that still have files: dropped, their
    deletion cut short (an agent killed between the commit and the delete) or refused (held open)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir(run_dir):
            match = TAIL_FILE.fullmatch(name)
            if match and int(match.group(1)) < table.oldest.k:
                found.add(int(match.group(1)))
    return sorted(found)[:1000]


def delete_segments(run_dir: Path, segments: list[int]) -> list[int]:
    """Delete the files of the tail segments ``segments``; those that could not be (one held open,
    on Windows) are returned, to be tried again."""
    from arena_ls import platform

    remaining = []
    for k in segments:
        try:
            gone = all([platform.remove_file(path) for path in segment_paths(run_dir, k)])
        except OSError:
            gone = False
        if not gone:
            remaining.append(k)
    return remaining


def files_size(*paths: Path) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total


class Drop:
    """What dropping one tail segment keeps (the middle's new lines) and loses (counted)."""

    def __init__(self) -> None:
        self.text = bytearray()
        self.index = bytearray()
        self.records = 0
        self.lines = 0
        self.bytes = 0
        self.source_records = 0
        self.gap_seq: int | None = None


def extract(
    run_dir: Path,
    tail: Tail,
    keepers: tuple[Callable[[bytes, bool], bool], Callable[[bytes], bool]],
    end_seq: int | None = None,
) -> Drop:
    """Read tail segment ``tail`` whole: its kept lines as middle records, and what it drops.

    ``end_seq``: the seq of the line after the segment's last (the next tail's first): an inert
    record (``FLAG_INERT``) is then counted from the sequence numbers alone, its bytes never read;
    without it, or where the numbers do not add up (damage), the record is read and counted."""
    may_hold, is_event = keepers
    drop = Drop()
    log_path, idx_path = segment_paths(run_dir, tail.k)
    with open(idx_path, "rb") as idx, open(log_path, "rb") as text:
        headers = idx.read()
        count = len(headers) // RECORD.size
        for number in range(count):
            stream, flags, length, first_seq, offset, at = RECORD.unpack_from(headers, number * RECORD.size)
            index = tail.base + drop.source_records
            kind = check_record(index, stream, flags, length)
            drop.source_records += 1
            if flags & FLAG_INERT:
                following = number + 1 < count
                after = RECORD.unpack_from(headers, (number + 1) * RECORD.size)[3] if following else end_seq
                if after is not None and 0 < after - first_seq <= length:
                    _count_dropped(drop, first_seq, after - first_seq, length)
                    continue
            text.seek(offset)
            data = text.read(length)
            if kind == FLAG_CONTINUED:  # part of an overlong line: never an event
                drop.bytes += len(data)
                continue
            candidate = stream == ARENA or may_hold(data, bool(flags & FLAG_QUIET))
            if not candidate:  # a flood's usual record: counted whole, never split into lines
                final = kind == FLAG_FINAL_PARTIAL
                _count_dropped(drop, first_seq, data.count(b"\n") + final, len(data) + final)
                continue
            _keep_events(drop, data, (stream, kind, first_seq, index, at), is_event)
    return drop


def _count_dropped(drop: Drop, first_seq: int, lines: int, size: int) -> None:
    drop.lines += lines
    drop.bytes += size
    if lines:
        drop.gap_seq = first_seq + lines - 1


def _keep_events(
    drop: Drop, data: bytes, record: tuple[int, int, int, int, float], is_event: Callable[[bytes], bool]
) -> None:
    """Split a record that may hold events into lines: the events (every ``arena`` line) are kept
    for the middle, the rest counted as dropped."""
    stream, kind, first_seq, index, at = record
    raws = data.split(b"\n")
    if kind == FLAG_LINES:
        raws.pop()
    for number, raw in enumerate(raws):
        if stream == ARENA or is_event(raw):
            line = raw + b"\n"
            relative = len(drop.text)  # made absolute by append_mid
            seq = first_seq + number
            drop.index += MID_RECORD.pack(stream, len(line), seq, index, first_seq, relative, at)
            drop.text += line
            drop.records += 1
        else:
            drop.lines += 1
            drop.bytes += len(raw) + 1
            drop.gap_seq = first_seq + number


def append_mid(run_dir: Path, table: Table, drop: Drop, *, sync: bool = True) -> None:
    """Write ``drop``'s lines after the committed middle, synced (the table commits them; with
    background commits the committer syncs them before it saves that table)."""
    if not drop.records:
        return
    start = table.mid_bytes
    index = bytearray()
    for number in range(drop.records):
        fields = list(MID_RECORD.unpack_from(drop.index, number * MID_RECORD.size))
        fields[5] += start
        index += MID_RECORD.pack(*fields)
    for name, data, committed in (
        (MID_LOG, bytes(drop.text), table.mid_bytes),
        (MID_IDX, bytes(index), table.mid_records * MID_RECORD.size),
    ):
        fd = os.open(run_dir / name, os.O_WRONLY | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o644)
        try:
            os.ftruncate(fd, committed)  # what a drop cut short left beyond the commit
            os.lseek(fd, committed, os.SEEK_SET)
            write_all(fd, data)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
