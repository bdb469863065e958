"""The files of a capped log (``logs.maxRunMb``, contract 7.1): head, middle, tail segments.

Until a run's log reaches half its cap it is the plain pair ``output.log`` /
``output.idx``. Past that the pair is frozen as the *head* and the agent
writes *tail segments* ``output.t<k>.log`` / ``output.t<k>.idx`` (the same
format; records keep their global seqs, offsets are the segment's own).
Once the tails hold more than half the cap without their oldest one, the
oldest is dropped: the lines worth keeping (every ``arena`` line, every
progress, checkpoint, eval and health event) are appended to the *middle*,
``output.mid.log`` / ``output.mid.idx`` (one ``MID_RECORD`` per line, with the
line's own seq), then the segment's files are deleted.

``output.segments.json`` (replaced atomically) says which tails are kept,
how much of the middle is committed and how much was dropped; readers trust
nothing beyond it. Its absence means the log was never capped.

A tail segment is an eighth of the kept tail, never under 4 MiB
(``SEGMENT_FLOOR_BYTES``) nor over 16 MB: each costs two table saves and two
files made and deleted, a toll a flood must pay per megabyte at most (issue
39: 16 KB segments under a 64 KB cap made it pay 64 times, 60-200 times the
uncapped write). The agents' writers save the table on a thread of their own
(``segment_commits``), never in the trainer's pump.

A record's *global index* is its position in the log as written: the head's
records are 0..H-1, a tail's are ``base`` onwards. A middle line carries the
global index of the record it came from, so every reader (``arena/metrics``'s
cursors, the insights' scanner) keeps its numbering across the drop.

Standard library only: the agent's writer uses it before anything heavy loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
from pathlib import Path
from typing import Any

SEGMENTS_FILE = "output.segments.json"
MID_LOG = "output.mid.log"
MID_IDX = "output.mid.idx"
HEAD = 0
"""The segment id of the head (``output.log``) in a cursor."""
MID = 2**31
"""The segment id of the middle in a cursor."""
MID_RECORD = struct.Struct("<BxIQQQQd")
"""stream, length, the line's seq, its record's global index, that record's first seq,
byte offset in output.mid.log, arrival time."""
SEGMENT_FRACTION = 8
"""A tail segment is an eighth of the kept tail, and at least ``SEGMENT_FLOOR_BYTES``: the log on
disk exceeds the cap by at most one segment."""
MIN_SEGMENT_BYTES = 16 << 10
"""The smallest cap is four of these (64 KB); a writer may be given segments this small (tests of
the format), never smaller."""
SEGMENT_FLOOR_BYTES = 4 << 20
"""The smallest tail segment the agent writes, whatever the cap (issue 39): each segment costs a
fixed toll (two files made and deleted, two table commits and two syncs of the middle, about
2–4 ms on a quiet disk, far more on a loaded one), so a segment that shrank with the cap (16 KB
under a 64 KB cap) made a flood pay it 64 times a megabyte, 60–200 times the uncapped write.
At 1 MiB a block-buffered flood still paid it 1.6-2.3 times its uncapped time (one toll a
millisecond or two of writing); at 4 MiB the toll is a quarter of that. The price is disk: a capped
log may exceed its cap by this much (a 64 KB cap keeps its 64 KB and at most 4 MiB more)."""
MAX_SEGMENT_BYTES = 16 << 20
"""Dropping a segment reads it once, in the trainer's pump: bounded to keep that short."""
DEFAULT_MAX_RUN_MB = 2048.0


class SegmentsDamaged(ValueError):
    """``output.segments.json`` is not one a writer makes."""


def segment_paths(run_dir: Path, k: int) -> tuple[Path, Path]:
    """(log, index) of segment ``k``: the head for 0, tail ``k`` otherwise."""
    if k == HEAD:
        return run_dir / "output.log", run_dir / "output.idx"
    return run_dir / f"output.t{k}.log", run_dir / f"output.t{k}.idx"


def segment_bytes(half: int, floor: int = SEGMENT_FLOOR_BYTES) -> int:
    """The size of one tail segment for a kept tail of ``half`` bytes (at least ``floor``)."""
    return max(floor, MIN_SEGMENT_BYTES, min(MAX_SEGMENT_BYTES, half // SEGMENT_FRACTION))


def cap_bytes(max_run_mb: object) -> int | None:
    """The cap in bytes, or None for no cap (0, or anything that is not a number >= 0)."""
    if isinstance(max_run_mb, bool) or not isinstance(max_run_mb, (int, float)):
        return int(DEFAULT_MAX_RUN_MB * 1024 * 1024)
    if not 0 < max_run_mb < 2**40:
        return None
    return max(4 * MIN_SEGMENT_BYTES, int(max_run_mb * 1024 * 1024))


class Tail:
    """One kept tail segment: its id, its first record's global index, its first line's seq."""

    __slots__ = ("base", "first_seq", "k")

    def __init__(self, k: int, base: int, first_seq: int) -> None:
        self.k = k
        self.base = base
        self.first_seq = first_seq


class Table:
    """``output.segments.json``: what of a capped log is kept."""

    def __init__(self, cap: int, head_records: int, head_end_seq: int) -> None:
        self.cap = cap
        self.head_records = head_records
        self.head_end_seq = head_end_seq
        self.tails: list[Tail] = []
        self.mid_records = 0
        self.mid_bytes = 0
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self.dropped_records = 0
        self.gap_seq: int | None = None
        """The seq of the gap line: that of the last line dropped (None: no line dropped yet)."""
        self.doomed: list[int] = []
        """Dropped segments whose files could not be deleted yet (held open on Windows)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "cap": self.cap,
            "head": [self.head_records, self.head_end_seq],
            "tails": [[t.k, t.base, t.first_seq] for t in self.tails],
            "mid": [self.mid_records, self.mid_bytes],
            "dropped": [self.dropped_lines, self.dropped_bytes, self.dropped_records],
            "gap": self.gap_seq,
            "doomed": self.doomed,
        }

    @classmethod
    def from_json(cls, payload: Any) -> Table:
        try:
            table = cls(_int(payload["cap"]), *map(_int, payload["head"]))
            table.tails = [Tail(*map(_int, entry)) for entry in payload["tails"]]
            table.mid_records, table.mid_bytes = map(_int, payload["mid"])
            table.dropped_lines, table.dropped_bytes, table.dropped_records = map(_int, payload["dropped"])
            gap = payload.get("gap")
            table.gap_seq = None if gap is None else _int(gap)
            table.doomed = [_int(k) for k in payload.get("doomed", [])][:1000]
        except (KeyError, TypeError, ValueError) as error:
            raise SegmentsDamaged(f"{SEGMENTS_FILE} is damaged: {error}") from error
        if not table.tails or len(table.tails) > 10_000 or any(t.k < 1 for t in table.tails):
            raise SegmentsDamaged(f"{SEGMENTS_FILE} lists no tail segment")
        return table

    @property
    def oldest(self) -> Tail:
        return self.tails[0]

    @property
    def current(self) -> Tail:
        return self.tails[-1]

    def tail(self, k: int) -> Tail | None:
        for tail in self.tails:
            if tail.k == k:
                return tail
        return None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"{value!r} is not a position")
    return value


def load_table(run_dir: Path) -> Table | None:
    """The run's segment table; None when its log was never capped."""
    from arena_ls import platform  # light: psutil is imported only where processes are looked at

    try:
        raw = platform.read_bytes_shared(run_dir / SEGMENTS_FILE)
    except FileNotFoundError:
        return None
    try:
        payload = json.loads(raw)
    except ValueError as error:
        raise SegmentsDamaged(f"{SEGMENTS_FILE} is not JSON: {error}") from error
    return Table.from_json(payload)


def save_table(run_dir: Path, table: Table) -> None:
    """Replace the table atomically (temporary file, fsync, rename)."""
    save_table_bytes(run_dir, table_bytes(table))


def table_bytes(table: Table) -> bytes:
    """The table as its file holds it (a snapshot: the table may change after)."""
    return json.dumps(table.to_json()).encode()


def save_table_bytes(run_dir: Path, data: bytes) -> None:
    """Replace the table file with ``data`` atomically (temporary file, fsync, rename)."""
    from arena_ls import platform

    temporary = run_dir / (SEGMENTS_FILE + ".tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        platform.replace_file(temporary, run_dir / SEGMENTS_FILE)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


GAP_LINE = re.compile(r"… \d+ lines \(.*\) of output were dropped here to keep the log under logs\.maxRunMb")
"""What ``gap_text`` writes (only the agent writes ``arena`` lines: a trainer cannot forge one)."""


def gap_text(table: Table) -> str:
    """The one ``arena`` line that stands for the dropped middle."""
    return (
        f"… {table.dropped_lines} lines ({_size(table.dropped_bytes)}) of output were dropped here to keep "
        f"the log under logs.maxRunMb ({_size(table.cap)}); every progress, checkpoint, eval and health "
        "line among them, and every line of arena's own, is kept above"
    )


def _size(count: int) -> str:
    if count >= 1 << 20:
        return f"{count / (1 << 20):.1f} MB"
    if count >= 1 << 10:
        return f"{count / (1 << 10):.1f} KB"
    return f"{count} bytes"
