"""The captured output of a run, on disk, and how it is read back as lines.

The writing side (the format, ``OutputWriter``, the pipe ``Pump``) lives in
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
import json
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import attrs

from arena_ls.lifecycle import supervisor_events
from arena_ls.lifecycle.outputlog import (
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
    count_recorded_lines,
)
from arena_ls.lifecycle.supervisor_events import SupervisorEvent
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

    def encode(self) -> str:
        payload = {
            "r": self.record,
            "o": self.offset,
            "s": self.seq,
            "p": {str(k): list(v) for k, v in self.open_lines.items()},
            "i": self.ident,
        }
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
    first = RECORD.unpack(head)[5] if len(head) == RECORD.size else 0.0
    return f"{stat.st_ino}:{first:.6f}"


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


class OutputReader:
    """Server side: reads a run's lines from disk from any cursor."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._idx_path = run_dir / "output.idx"
        self._log_path = run_dir / "output.log"

    def record_count(self) -> int:
        try:
            return self._idx_path.stat().st_size // RECORD.size
        except OSError:
            return 0

    def start(self) -> Cursor:
        return Cursor(ident=file_ident(self.run_dir))

    def tail_cursor(self, keep_lines: int) -> Cursor:
        """A cursor ``keep_lines`` lines before the end (or at the start of a shorter log).

        Records partition the line numbers in order, so the record holding
        the target line is found by a binary search on the first ``seq`` of
        each; the cursor then points at that line inside it.
        """
        count = self.record_count()
        if count == 0:
            return self.start()
        ident = file_ident(self.run_dir)
        target = max(0, count_recorded_lines(self._idx_path) - keep_lines)
        with open(self._idx_path, "rb") as idx:
            low, high = 0, count - 1
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
        return Cursor(record=low, offset=offset, seq=target, ident=ident)

    def read(self, cursor: Cursor, limit: int, max_bytes: int = 8 << 20) -> Page:
        """Up to ``limit`` complete lines after ``cursor``, and the next cursor."""
        reset = self._check_ident(cursor)
        if reset is not None:
            cursor = self.start()
        count = self.record_count()
        if cursor.record > count:
            return Page([], self.start(), reset="the log is shorter than the cursor (truncated)")
        if count == cursor.record:
            return Page([], cursor, reset)
        lines: list[LogLine] = []
        updates: list[LogLine] = []
        damage: str | None = None
        record, offset, seq = cursor.record, cursor.offset, cursor.seq
        open_starts = dict(cursor.open_lines)
        read_bytes = 0
        try:
            open_parts = self._reopen_lines(cursor)
            with open(self._idx_path, "rb") as idx, open(self._log_path, "rb") as log:
                idx.seek(record * RECORD.size)
                log.seek(offset)
                while record < count and len(lines) < limit and read_bytes < max_bytes:
                    header = idx.read(RECORD.size)
                    if len(header) < RECORD.size:
                        break
                    stream, flags, length, first_seq, at_offset, at = RECORD.unpack(header)
                    _check_position(record, at_offset, offset, first_seq, seq)
                    check_record(record, stream, flags, length)
                    data = log.read(length)
                    if len(data) < length:
                        raise DamagedLog(f"output.idx record {record} points past the end of output.log")
                    skip = max(0, seq - first_seq)
                    room = limit - len(lines)
                    total, fresh = self._lines_of(stream, flags, data, first_seq, at, open_parts, skip, room)
                    if flags == FLAG_CONTINUED and b"\r" in data:
                        updates.append(LogLine(-1, STREAMS[stream], clean_text(data), at))
                    if total - skip > room:  # stop inside this record; seq says where
                        lines.extend(fresh)
                        seq = first_seq + skip + room
                        break
                    if flags == FLAG_CONTINUED:
                        open_starts.setdefault(stream, (record, offset))
                    else:
                        open_starts.pop(stream, None)
                    lines.extend(fresh)
                    read_bytes += length
                    record += 1
                    offset += length
                    seq = max(seq, first_seq + total)
        except DamagedLog as error:
            damage = str(error)
        except FileNotFoundError as error:
            damage = f"{Path(error.filename or self._log_path).name} is missing"
        except (OSError, ValueError, struct.error) as error:
            damage = f"the run's output cannot be read: {error}"
        next_cursor = Cursor(record, offset, seq, open_starts, cursor.ident or file_ident(self.run_dir))
        return Page(lines, next_cursor, reset, updates, damage)

    def check_cursor(self, cursor: Cursor) -> None:
        """Raise ``InvalidCursor`` unless ``cursor`` is a position a read of this log gives.

        Its offset must be where its record starts in the log, its seq inside
        that record's lines, and each unfinished line must start at a
        continued record of its stream. A cursor of a log that was since
        truncated or replaced is not checked here: ``read`` restarts it.
        """
        if self._check_ident(cursor) is not None:
            return
        count = self.record_count()
        if cursor.record > count:
            return
        if count == 0:
            if (cursor.offset, cursor.seq) != (0, 0) or cursor.open_lines:
                raise InvalidCursor("it points into a log that is still empty")
            return
        try:
            self._check_positions(cursor, count)
        except OSError:
            return  # the log went away meanwhile: ``read`` says so

    def _check_positions(self, cursor: Cursor, count: int) -> None:
        with open(self._idx_path, "rb") as idx:
            if cursor.record < count and _damaged_at(idx, cursor.record):
                # Where a read of a damaged log stops: valid if it is where the intact part ends
                # (``read`` then reports the damage again, and the lines before it stay readable).
                if cursor.offset != _end_of(idx, cursor.record - 1) or cursor.open_lines:
                    raise InvalidCursor(f"its offset is not where record {cursor.record} starts in the log")
                return
            if cursor.record < count:
                _, _, _, first_seq, offset, _ = _record_at(idx, cursor.record)
                last_seq = (
                    _record_at(idx, cursor.record + 1)[3]
                    if cursor.record + 1 < count
                    else count_recorded_lines(self._idx_path, count)
                )
            else:
                _, _, length, _, start, _ = _record_at(idx, count - 1)
                offset = start + length
                first_seq = last_seq = count_recorded_lines(self._idx_path, count)
            if cursor.offset != offset:
                raise InvalidCursor(f"its offset is not where record {cursor.record} starts in the log")
            if not first_seq <= cursor.seq <= last_seq:
                raise InvalidCursor(f"its line number is not inside record {cursor.record}")
            for stream, (start_record, start_offset) in cursor.open_lines.items():
                if not 0 <= cursor.record - start_record <= MAX_OPEN_SPAN or start_record >= count:
                    raise InvalidCursor("an unfinished line in it starts at no record of this log")
                rec_stream, flags, _, _, offset, _ = _record_at(idx, start_record)
                if (rec_stream, flags, offset) != (stream, FLAG_CONTINUED, start_offset):
                    raise InvalidCursor("an unfinished line in it does not start where the log has one")

    def _check_ident(self, cursor: Cursor) -> str | None:
        if not cursor.ident or cursor.record == 0:
            return None
        current = file_ident(self.run_dir)
        if current and current != cursor.ident:
            return "the log file was truncated or replaced since this cursor was made; reading from its start"
        try:
            size = self._log_path.stat().st_size
        except OSError:
            return None
        if size < cursor.offset:
            return "the log file was truncated or replaced since this cursor was made; reading from its start"
        return None

    def _reopen_lines(self, cursor: Cursor) -> dict[int, OpenLine]:
        """Rebuild the unfinished overlong lines a cursor points into."""
        parts: dict[int, OpenLine] = {}
        if not cursor.open_lines:
            return parts
        with open(self._idx_path, "rb") as idx, open(self._log_path, "rb") as log:
            for stream, (start_record, start_offset) in cursor.open_lines.items():
                buffer = OpenLine()
                idx.seek(start_record * RECORD.size)
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
        flags: int,
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
        if flags == FLAG_CONTINUED:
            open_parts.setdefault(stream, OpenLine()).add(data)
            return 0, []
        raws = data.split(b"\n")
        if flags == FLAG_LINES:
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


def iter_all_lines(run_dir: Path, batch: int = 5000) -> Iterator[LogLine]:
    """Every line of a run, in order (for tests and tools)."""
    reader = OutputReader(run_dir)
    cursor = reader.start()
    while True:
        page = reader.read(cursor, batch)
        yield from page.lines
        if page.cursor.record == cursor.record:
            return
        cursor = page.cursor


def iter_records(run_dir: Path, start: int = 0) -> Iterator[tuple[int, int, int, bytes, float]]:
    """(index, stream, flags, data, time) of each record from ``start`` (for scanners).

    Stops at the first damaged record, and never reads more than a record can hold."""
    idx_path, log_path = run_dir / "output.idx", run_dir / "output.log"
    try:
        with open(idx_path, "rb") as idx, open(log_path, "rb") as log:
            idx.seek(start * RECORD.size)
            index = start
            while True:
                block = idx.read(RECORD.size * 4096)
                usable = len(block) - len(block) % RECORD.size
                if usable == 0:
                    return
                for stream, flags, length, _, offset, at in RECORD.iter_unpack(block[:usable]):
                    try:
                        check_record(index, stream, flags, length)
                    except DamagedLog:
                        return  # damaged from here on: the records before it are all there is
                    log.seek(offset)
                    data = log.read(length)
                    if len(data) < length:
                        return
                    yield index, stream, flags, data, at
                    index += 1
                if usable < len(block) or len(block) < RECORD.size * 4096:
                    return
    except FileNotFoundError:
        return
