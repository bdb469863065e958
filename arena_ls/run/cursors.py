"""A position in a run's output (``Cursor``), as a client holds it: opaque, bounded, checked."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import attrs

from arena_ls.run.logsegments import (
    HEAD,
    MID,
)
from arena_ls.run.outputlog import (
    RECORD,
    STREAMS,
)


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
