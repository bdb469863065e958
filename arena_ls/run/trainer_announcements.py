"""What a trainer announces: progress and checkpoints, from its output lines.

Three sources, in order of trust:

1. ``@arena {json}`` lines (the contract's trainer side);
2. the job's ``progress.pattern`` / ``checkpoint.pattern`` regular expressions;
3. a default that understands common plain lines: ``step 120/2000 loss 2.31``,
   ``Step 120 | loss=2.31``, ``iter 120: loss 2.31`` and tqdm's
   ``120/2000 [00:10<02:00, 3.20it/s, loss=2.31]``; and, for checkpoints when
   the job has no ``checkpoint.pattern``, the built-in ``BUILTIN_CHECKPOINT_PATTERNS``
   (``saved checkpoint to ckpt.pt at step 200``, ``Checkpoint saved: step=200``,
   Hugging Face's ``Saving model checkpoint to out/checkpoint-200``). The
   trainer gate AR014 accepts exactly these spellings, so the gate and the
   supervisor agree on what counts as an announced checkpoint.

The agent and the server both use this module, on complete lines only.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from typing import Any

import attrs

from arena_ls.run.checkpoint_lines import (
    BUILTIN_CHECKPOINT_PATTERNS as BUILTIN_CHECKPOINT_PATTERNS,  # re-exported
)
from arena_ls.run.checkpoint_lines import chunk_mentions_checkpoint, mentions_checkpoint

ARENA_PREFIX = "@arena "
ARENA_PREFIX_BYTES = ARENA_PREFIX.encode()

MATCHED_CHARS = 2048
"""A plain line is matched against the patterns on its first 2 KiB: no progress or
checkpoint line is longer, and a pattern's cost on a 10 MB line would hold the scanner."""

log = logging.getLogger(__name__)

_DEFAULT_PROGRESS = [
    re.compile(
        r"\b(?:step|iter(?:ation)?|it)\s*[:=]?\s*(?P<step>\d+)\s*(?:/\s*(?P<total>\d+))?"
        r"[^\n]*?\bloss\s*[:=]?\s*(?P<loss>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))",
        re.IGNORECASE,
    ),
    # tqdm: " 45%|####      | 120/2000 [00:10<02:00,  3.20it/s, loss=2.31]"
    re.compile(r"(?P<step>\d+)/(?P<total>\d+)\s*\[[^\]]*?\bloss=(?P<loss>[-+]?[0-9.eE+-]+|nan|inf)"),
    re.compile(r"(?P<step>\d+)/(?P<total>\d+)\s*\[[^\]]*\]"),
]


@attrs.frozen
class Progress:
    """A progress announcement."""

    step: int
    total: int | None = None
    loss: float | None = None
    lr: float | None = None


@attrs.frozen
class Checkpoint:
    """A checkpoint announcement; ``bytes`` and ``sha256`` of the file when announced (contract 8.2)."""

    step: int
    path: str
    bytes: int | None = None
    sha256: str | None = None


@attrs.frozen
class Eval:
    """An evaluation announcement: the held-out loss at a step (``arena plot`` draws it)."""

    step: int
    loss: float | None = None


Event = Progress | Checkpoint | Eval


MAX_NUMBER = 10**15
"""The largest magnitude an announced number may have (contract 7.1): beyond it the
line is an ordinary log line. A step past it could not be a real step, and a value
past it overflows what a float, a ``--start-step`` or a plot can carry."""
MAX_PATH_CHARS = 4096
"""The longest checkpoint path an announcement may carry (longer is an ordinary line)."""


class OutOfRange(ValueError):
    """A number (or path) an announcement carries is outside what the contract allows."""


class _Beyond:
    """A JSON number too large to read: an integer of over 20 digits, or a float that overflows."""


BEYOND = _Beyond()


def _bounded_int(text: str) -> int | _Beyond:
    return int(text) if len(text) <= 20 else BEYOND  # never converts thousands of digits


def _bounded_float(text: str) -> float | _Beyond:
    number = float(text)
    return BEYOND if math.isinf(number) else number  # ``1e400``, not the literal ``Infinity``


_BOUNDED_DECODER = json.JSONDecoder(parse_int=_bounded_int, parse_float=_bounded_float)
"""One decoder for every line: ``json.loads`` with these arguments built a new ``JSONDecoder`` (and
its scanner) per call, a sixth of the CPU of reading a log of announcements (a page of 10,000
checkpoints). Shared by threads as ``json``'s own default decoder is: its scanner keeps nothing
of a line but a memo of key strings, which only spares copies."""


def load_bounded_json(text: str) -> Any:
    """``json.loads``, with numbers too large to read as ``BEYOND`` (``NaN``/``Infinity`` kept)."""
    return _BOUNDED_DECODER.decode(text)


def _number(value: object) -> float | None:
    """An announced value (loss, lr): None when absent or not a number; NaN and infinities kept.

    A NaN or infinite loss is news (the watchdog's ``nan-loss``), so those are
    kept; a finite number beyond ``MAX_NUMBER``, or an integer too large for a
    float, raises ``OutOfRange``: the whole line is then not an announcement.
    """
    if isinstance(value, bool):
        return None
    if value is BEYOND:
        raise OutOfRange("a number too large to read")
    if isinstance(value, int):
        if not -MAX_NUMBER <= value <= MAX_NUMBER:
            raise OutOfRange(f"{_abridged(value)} is beyond 10^15")
        return float(value)
    number = value if isinstance(value, float) else _float_of(value) if isinstance(value, str) else None
    if number is None:
        return None
    if math.isfinite(number) and abs(number) > MAX_NUMBER:
        raise OutOfRange(f"{number!r} is beyond 10^15")
    return number


def _float_of(text: str) -> float | None:
    """A number written in a plain line (a regex group): ``inf`` only when spelled so."""
    try:
        number = float(text)
    except ValueError:
        return None
    if math.isinf(number) and "inf" not in text.lower():
        raise OutOfRange(f"{text[:40]} is beyond 10^15")  # digits that overflow a float
    return number


def _int(value: object) -> int | None:
    """A step or total: None when absent, not a number, NaN or negative; huge ones raise."""
    number = _number(value)
    if number is None or not math.isfinite(number) or number < 0:
        return None
    return int(number)


def _abridged(value: object) -> str:
    """A value for a message, never formatted whole (an int of thousands of digits)."""
    if isinstance(value, int) and not -(10**40) <= value <= 10**40:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)[:40]


def _path(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    if len(value) > MAX_PATH_CHARS or "\x00" in value:
        raise OutOfRange("not a usable checkpoint path")
    return value


SHA256_HEX = re.compile(r"[0-9a-fA-F]{64}")


def _sha256(value: object) -> str | None:
    """An announced SHA-256: 64 hex digits (read lowercase); anything else is out of range."""
    if value is None:
        return None
    if not isinstance(value, str) or SHA256_HEX.fullmatch(value) is None:
        raise OutOfRange("sha256 is not 64 hex digits")
    return value.lower()


def _size(value: object) -> int | None:
    """An announced file size: a whole number of bytes, 0 to 10^15; anything else is out of range."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_NUMBER:
        raise OutOfRange("bytes is not a whole number of bytes")
    return value


def parse_arena_line(text: str) -> Event | None:
    """Parse one ``@arena {...}`` line; None when it is not a valid announcement.

    Never raises: a line whose values are out of range (``OutOfRange``), whose
    JSON is invalid or nested too deep, is an ordinary log line."""
    return _arena_line(text)[0]


PROTOCOL = 1
"""The version of the ``@arena`` lines this agent reads (the kit's ``arena_trainer.PROTOCOL``)."""


def _arena_line(text: str) -> tuple[Event | None, str | None]:
    """The line's event, and what its ``protocol`` is when it is not ``PROTOCOL`` (else None)."""
    if not text.startswith(ARENA_PREFIX):
        return None, None
    try:
        payload = load_bounded_json(text[len(ARENA_PREFIX) :])
    except (ValueError, RecursionError, MemoryError):
        return None, None
    if not isinstance(payload, dict):
        return None, None
    other = other_protocol(payload)
    try:
        return _announcement(payload), other
    except OutOfRange:
        return None, other


def other_protocol(payload: dict[str, object]) -> str | None:
    """How an announcement's ``protocol`` differs from ``PROTOCOL``, for a message; None when it
    does not (absent, as in a hand-written line, means ``PROTOCOL``). Contract 8.1: such a
    trainer is told so in the log, and its lines are still read as ``PROTOCOL``'s."""
    if "protocol" not in payload:
        return None
    value = payload["protocol"]
    if value is BEYOND:
        return "a number too large to read"
    if isinstance(value, int) and not isinstance(value, bool):
        return None if value == PROTOCOL else _abridged(value)
    return f"{_abridged(value)}, not an integer"


def _announcement(payload: dict[str, object]) -> Event | None:
    kind = payload.get("event")
    if kind not in ("progress", "checkpoint", "eval"):
        return None
    step = _int(payload.get("step"))
    if step is None:
        return None
    if kind == "progress":
        return Progress(
            step=step,
            total=_int(payload.get("total")),
            loss=_number(payload.get("loss")),
            lr=_number(payload.get("lr")),
        )
    if kind == "checkpoint":
        path = _path(payload.get("path"))
        if path is None:
            return None
        return Checkpoint(step, path, _size(payload.get("bytes")), _sha256(payload.get("sha256")))
    return Eval(step=step, loss=_number(payload.get("loss")))


def _from_match(match: re.Match[str], *, checkpoint: bool) -> Event | None:
    """The event a pattern's match names; None when a value in it is out of range."""
    try:
        return _event_of_groups(match.groupdict(), checkpoint=checkpoint)
    except OutOfRange:
        return None


def _event_of_groups(groups: dict[str, str | Any], *, checkpoint: bool) -> Event | None:
    step = _int(groups.get("step"))
    if step is None:
        return None
    if checkpoint:
        return Checkpoint(step=step, path=_path(str(groups.get("path") or "")) or "")
    return Progress(
        step=step,
        total=_int(groups.get("total")),
        loss=_number(groups.get("loss")),
        lr=_number(groups.get("lr")),
    )


@attrs.define
class EventParser:
    """Turns complete output lines into events, per the job's patterns."""

    progress_pattern: re.Pattern[str] | None = None
    checkpoint_pattern: re.Pattern[str] | None = None
    use_defaults: bool = True
    speaks_arena: bool = False
    """Set once an ``@arena`` checkpoint line is seen: the built-in spellings are then
    ignored, so a trainer that prints both (the reference does) is not counted twice."""
    protocol_note: str | None = None
    """The first ``protocol`` announced that is not ``PROTOCOL``, until ``take_protocol_note``."""
    protocol_noted: bool = False
    """A different protocol was seen (and so is never noted again by this parser: one line a run)."""

    @classmethod
    def for_patterns(cls, progress: str | None, checkpoint: str | None) -> EventParser:
        """Compile the job's patterns (already validated by the manifest loader)."""
        return cls(
            progress_pattern=re.compile(progress) if progress else None,
            checkpoint_pattern=re.compile(checkpoint) if checkpoint else None,
        )

    def parse(self, text: str) -> Event | None:
        """The event a line announces, or None (never raises: see ``parse_safely``)."""
        if text.startswith(ARENA_PREFIX):
            event, other = _arena_line(text)
            if other is not None and not self.protocol_noted:
                self.protocol_noted = True
                self.protocol_note = other
            if isinstance(event, Checkpoint):
                self.speaks_arena = True
            return event
        if len(text) > MATCHED_CHARS:
            text = text[:MATCHED_CHARS]
        if self.checkpoint_pattern is not None:
            match = self.checkpoint_pattern.search(text)
            if match:
                return _from_match(match, checkpoint=True)
        elif self.use_defaults and not self.speaks_arena and mentions_checkpoint(text):
            found = builtin_checkpoint(text)
            if found is not None:
                return found
        if self.progress_pattern is not None:
            match = self.progress_pattern.search(text)
            if match:
                return _from_match(match, checkpoint=False)
            return None
        if self.use_defaults:
            return _default_progress(text)
        return None

    def take_protocol_note(self) -> str | None:
        """The message, once, that the trainer announces a protocol other than ``PROTOCOL``."""
        other, self.protocol_note = self.protocol_note, None
        if other is None:
            return None
        return (
            f"the trainer announces @arena protocol {other}; this arena-ls reads protocol {PROTOCOL}: "
            f"its lines are read as protocol {PROTOCOL} (arena_trainer.py and arena-ls are of "
            "different versions)"
        )

    def might_match(self, data: bytes) -> bool:
        """Cheap pre-filter over a chunk: can any line in it be an event?"""
        if self.progress_pattern is not None or self.checkpoint_pattern is not None:
            return True
        if _has_announcement(data):
            return True
        return self.use_defaults and (
            b"/" in data or b"loss" in data.lower() or chunk_mentions_checkpoint(data)
        )

    def parse_chunk(self, data: bytes) -> Iterator[Event]:
        """Events in a chunk of complete lines (undecodable bytes replaced)."""
        if not self.might_match(data):
            return
        for raw in data.splitlines():
            line = raw.decode("utf-8", "replace")
            if "\r" in line:
                line = line.rsplit("\r", 1)[-1] or line
            event = self.parse_safely(line)
            if event is not None:
                yield event

    def parse_safely(self, text: str) -> Event | None:
        """``parse``, and should it ever raise, the line is an ordinary one (logged).

        One line must never cost the events of the lines around it (a checkpoint
        announced in the same write) nor fail the run (contract 7.1)."""
        try:
            return self.parse(text)
        except Exception:
            log.exception("a trainer line could not be parsed; it is kept as an ordinary line")
            return None

    def parse_flood(self, data: bytes, tail_bytes: int = 4096) -> Iterator[Event]:
        """Events of a large chunk, for a trainer that floods its output.

        Every announcement is found (``@arena`` lines anywhere, and every
        line when the job has a checkpoint pattern, since a checkpoint must
        never be missed), but progress, which is a level whose latest value
        wins, is looked for only in the chunk's last ``tail_bytes``. A flood
        of plain lines then costs one ``memchr`` for ``@`` instead of
        decoding and matching every line.
        """
        if (
            self.checkpoint_pattern is not None
            or len(data) <= tail_bytes
            or (self.use_defaults and not self.speaks_arena and chunk_mentions_checkpoint(data))
        ):
            yield from self.parse_chunk(data)
            return
        tail_start = data.rfind(b"\n", 0, len(data) - tail_bytes) + 1
        for line in _announcement_lines(data, tail_start):
            event = self.parse_safely(line)
            if event is not None:
                yield event
        yield from self.parse_chunk(data[tail_start:])

    def parse_quiet(self, data: bytes, tail_bytes: int = 4096) -> Iterator[Event]:
        """Events of a quiet chunk (``outputlog.FLAG_QUIET``: its writer found no ``@arena`` line
        and no checkpoint word in it): progress only, from its last ``tail_bytes`` as
        ``parse_flood`` reads a flood's, without searching it again for what it cannot hold."""
        if self.checkpoint_pattern is not None:  # never written quiet for such a job: read it all
            yield from self.parse_flood(data, tail_bytes)
            return
        tail_start = 0 if len(data) <= tail_bytes else data.rfind(b"\n", 0, len(data) - tail_bytes) + 1
        yield from self.parse_chunk(data[tail_start:] if tail_start else data)


def _has_announcement(data: bytes) -> bool:
    """Whether ``@arena `` occurs in ``data`` (a ``memchr`` for ``@`` first: most output has none)."""
    return b"@" in data and ARENA_PREFIX_BYTES in data


def _announcement_lines(data: bytes, end: int) -> Iterator[str]:
    """The ``@arena`` lines that start before ``end`` (at a line start or after a CR)."""
    at = data.find(b"@", 0, end)
    while at >= 0:
        if data.startswith(ARENA_PREFIX_BYTES, at) and (at == 0 or data[at - 1] in b"\n\r"):
            line_end = data.find(b"\n", at)
            raw = data[at : line_end if line_end >= 0 else len(data)]
            yield raw.split(b"\r", 1)[0].decode("utf-8", "replace")
        at = data.find(b"@", at + 1, end)


def builtin_checkpoint(text: str) -> Checkpoint | None:
    """The checkpoint a plain line announces in one of the built-in spellings, or None."""
    for pattern in BUILTIN_CHECKPOINT_PATTERNS:
        match = pattern.search(text)
        if match:
            event = _from_match(match, checkpoint=True)
            if isinstance(event, Checkpoint):
                return event
    return None


def _default_progress(text: str) -> Progress | None:
    if "loss" not in text.lower() and "/" not in text:
        return None
    for pattern in _DEFAULT_PROGRESS:
        match = pattern.search(text)
        if match:
            event = _from_match(match, checkpoint=False)
            if isinstance(event, Progress):
                return event
    return None


def is_bad_loss(loss: float | None) -> bool:
    """A loss announced as NaN or infinite."""
    return loss is not None and not math.isfinite(loss)
