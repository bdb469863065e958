"""A line of a run's output as every reader returns it, its text cleaned of terminal codes."""

from __future__ import annotations

import re

import attrs

from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.outputlog import (
    LINE_LIMIT,
)
from arena_ls.timeutil import iso_utc

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
    event: AgentRecord | None = attrs.field(default=None, eq=False)
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
