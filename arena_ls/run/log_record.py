"""The capture's record format, shared by the writer (``outputlog``), the capped log's drops
(``log_drop``) and every reader: streams, record flags, the record struct and its checks.

Standard library only (the agent loads it before anything heavy).
"""

from __future__ import annotations

import os
import struct

from arena_ls.run.checkpoint_lines import ascii_word_in, chunk_mentions_checkpoint

LINE_LIMIT = 64 * 1024
"""Lines are cut at 64 KiB in ``LogLine.text``; the file keeps everything."""

STREAMS = ("stdout", "stderr", "arena")
STDOUT, STDERR, ARENA = 0, 1, 2

FLAG_LINES = 0
"""The record holds one or more complete lines."""
FLAG_CONTINUED = 1
"""The record holds part of one overlong line; more of it follows."""
FLAG_FINAL_PARTIAL = 2
"""The record holds the stream's last line, which had no newline."""
FLAG_QUIET = 0x80
"""Beside ``FLAG_LINES`` on a record of the trainer's lines that can announce nothing but
progress: no ``@arena`` line (announcements, health) and no "checkpoint" in any case (the word
of every built-in spelling), written for a job without a ``checkpoint.pattern``. The writer
decides it once, on exactly the record's bytes (a word cut between two reads of the pipe is
whole in the record), and the agent's scan and the server's reader trust it: a quiet record's
progress is looked for in its tail only (a level: the latest wins), as for any flood's chunk,
and nothing else is searched for in it. ``check_record`` gives the kind without it."""
FLAG_INERT = 0x40
"""Beside ``FLAG_QUIET``, on a capped log's record (``logs.maxRunMb``) of a job without patterns
whose lines cannot even be progress: no ``/`` and no "loss" in any ASCII case, the built-in
progress spellings' marks (``logkeep.event_filters``). A drop of the tail segment that holds it
keeps none of its lines, and counts them from the records' sequence numbers without reading the
bytes back (issue 39: a block-buffered flood under a 64 KB cap read every megabyte twice).
Readers take it as quiet."""
ANNOUNCEMENT_PREFIX = b"@arena "

RECORD = struct.Struct("<BBIQQd")
"""stream, flags, length, seq of its first line, byte offset in output.log, arrival time."""
MAX_RECORD_BYTES = 16 << 20
"""No record the writer makes is longer (a read is at most 1 MiB plus an unfinished line):
a longer one is damage, and is never read into memory."""


class DamagedLog(ValueError):
    """The run's output files are damaged; the message names the file and what is wrong."""


def check_record(index: int, stream: int, flags: int, length: int) -> int:
    """The record's kind (``FLAG_LINES``, ``FLAG_CONTINUED`` or ``FLAG_FINAL_PARTIAL``: its flags
    without ``FLAG_QUIET`` and ``FLAG_INERT``); ``DamagedLog`` for a record no writer makes
    (unknown stream or flags, quiet or inert where no writer says so, absurd length)."""
    kind = flags & ~(FLAG_QUIET | FLAG_INERT)
    if stream >= len(STREAMS):
        raise DamagedLog(f"output.idx record {index} has unknown stream byte {stream}")
    quiet, inert = flags & FLAG_QUIET, flags & FLAG_INERT
    misplaced = (inert and not quiet) or (quiet and (kind != FLAG_LINES or stream == ARENA))
    if kind > FLAG_FINAL_PARTIAL or misplaced:
        raise DamagedLog(f"output.idx record {index} has unknown flags {flags}")
    if length > MAX_RECORD_BYTES:
        raise DamagedLog(f"output.idx record {index} claims {length} bytes, more than any record holds")
    return kind


def quiet_lines(data: bytes) -> bool:
    """Whether these complete lines can announce nothing but progress (``FLAG_QUIET``): a
    ``memchr`` for ``@`` (most output has none), then one lowering and one search for the word."""
    if b"@" in data and ANNOUNCEMENT_PREFIX in data:
        return False
    return not chunk_mentions_checkpoint(data)


def inert_lines(data: bytes) -> bool:
    """Whether quiet lines cannot be progress either (``FLAG_INERT``): a ``memchr`` for ``/``, then
    a case-blind search for "loss" (ASCII case, as the drop's filter lowers bytes)."""
    return b"/" not in data and not ascii_word_in(data, b"loss")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
