"""The agent's side of a run's captured output: the format, the writer, the pipe pumps.

The agent appends what the trainer writes, in large chunks, to
``output.log`` (plain bytes, readable with ``tail -f``) and one fixed-size
record per chunk to ``output.idx``. A record says which stream the chunk
came from, when it arrived, and the sequence number of its first line. The
agent only writes whole lines in a record, except for an overlong line
(over ``LINE_LIMIT`` bytes without a newline), which it writes in
continuation records so that memory stays bounded.

Standard library only: ``launch`` starts the trainer and its pumps with it
before the rest of the agent is loaded, so the trainer's first lines reach
the log as fast as its later ones. ``capture`` reads the files back.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

log = logging.getLogger("arena_ls.agent")

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

RECORD = struct.Struct("<BBIQQd")
"""stream, flags, length, seq of its first line, byte offset in output.log, arrival time."""
MAX_RECORD_BYTES = 16 << 20
"""No record the writer makes is longer (a read is at most 1 MiB plus an unfinished line):
a longer one is damage, and is never read into memory."""


class DamagedLog(ValueError):
    """The run's output files are damaged; the message names the file and what is wrong."""


def check_record(index: int, stream: int, flags: int, length: int) -> None:
    """Raise ``DamagedLog`` for a record no writer makes (unknown stream or flags, absurd length)."""
    if stream >= len(STREAMS):
        raise DamagedLog(f"output.idx record {index} has unknown stream byte {stream}")
    if flags > FLAG_FINAL_PARTIAL:
        raise DamagedLog(f"output.idx record {index} has unknown flags {flags}")
    if length > MAX_RECORD_BYTES:
        raise DamagedLog(f"output.idx record {index} claims {length} bytes, more than any record holds")


class OutputWriter:
    """Agent side: appends chunks from the trainer's pipes, whole lines at a time.

    Thread-safe: one reader thread per stream calls ``append``.
    """

    def __init__(self, run_dir: Path) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0)
        self._log_fd = os.open(run_dir / "output.log", flags, 0o644)
        self._idx_fd = os.open(run_dir / "output.idx", flags, 0o644)
        self._lock = threading.Lock()
        self._pending: dict[int, bytearray] = {STDOUT: bytearray(), STDERR: bytearray()}
        self._next_seq = count_recorded_lines(run_dir / "output.idx")
        self._offset = os.fstat(self._log_fd).st_size
        self._idx_size = os.fstat(self._idx_fd).st_size
        self.unwritten_lines = 0
        """Lines that could not be written since the last successful write (a full disk)."""
        self.unwritten_bytes = 0
        self.write_failures = 0
        """Every failed write so far (the agent turns a new one into ``disk-full`` evidence)."""
        self.last_error: OSError | None = None

    @property
    def lines_written(self) -> int:
        return self._next_seq

    def append(self, stream: int, data: bytes) -> tuple[bytes, bytes]:
        """Record a chunk; return (the complete lines it finished, an unfinished update).

        An unfinished line that carries a bare carriage return (a tqdm-style
        bar redrawn in place) is recorded at once as a continuation, so that
        its progress is seen live rather than when the bar finally ends its
        line. Only a ``\\r`` inside the unfinished line counts: one at its very
        end may be the first half of a ``\\r\\n`` (Windows line ends) whose
        ``\\n`` comes in the next chunk, and an earlier line's ``\\r\\n`` in
        the same chunk says nothing about the unfinished one.
        """
        with self._lock:
            pending = self._pending[stream]
            cut = data.rfind(b"\n")
            complete = b""
            if cut < 0:
                pending += data
            else:
                complete = bytes(pending) + data[: cut + 1] if pending else data[: cut + 1]
                pending.clear()
                pending += data[cut + 1 :]
                self._write(stream, FLAG_LINES, complete, complete.count(b"\n"))
            if len(pending) > LINE_LIMIT or _redrawn_in_place(pending):
                update = bytes(pending)
                self._write(stream, FLAG_CONTINUED, update, 0)
                pending.clear()
                return complete, update
            return complete, b""

    def append_line(self, stream: int, text: str) -> None:
        """Record a line of the supervisor's own (``stream`` is usually ARENA).

        A text with newlines inside (an error page a cluster answered with) is
        that many lines: the index counts what a reader splits, so that the
        cursors of ``arena/logs`` stay valid."""
        data = text.rstrip("\n").encode("utf-8", "replace") + b"\n"
        with self._lock:
            self._write(stream, FLAG_LINES, data, data.count(b"\n"))

    def finish_stream(self, stream: int) -> bytes:
        """At a stream's end: record its last line if it had no newline."""
        with self._lock:
            pending = self._pending[stream]
            if not pending:
                return b""
            data = bytes(pending)
            pending.clear()
            self._write(stream, FLAG_FINAL_PARTIAL, data, 1)
            return data

    def _write(self, stream: int, flags: int, data: bytes, lines: int) -> None:
        """Write a chunk and its record, or neither: a failed write (a full disk) is counted.

        The trainer never waits for the disk: what cannot be written is
        counted, and once writes succeed again one ``arena`` line says how
        many lines are missing, before the next chunk.
        """
        if self.unwritten_lines or self.unwritten_bytes:
            summary = (
                f"… {self.unwritten_lines} lines ({self.unwritten_bytes} bytes) of output could not be "
                f"written to the log: {_reason(self.last_error)}"
            ).encode() + b"\n"
            if not self._try_write(ARENA, FLAG_LINES, summary, 1):
                self._count_unwritten(data, lines, flags)
                return
            self.unwritten_lines = self.unwritten_bytes = 0
        if not self._try_write(stream, flags, data, lines):
            self._count_unwritten(data, lines, flags)

    def _try_write(self, stream: int, flags: int, data: bytes, lines: int) -> bool:
        try:
            _write_all(self._log_fd, data)
            record = RECORD.pack(stream, flags, len(data), self._next_seq, self._offset, time.time())
            _write_all(self._idx_fd, record)
        except OSError as error:
            self.last_error = error
            self.write_failures += 1
            with contextlib.suppress(OSError):  # undo a partial write: shrinking needs no space
                os.ftruncate(self._log_fd, self._offset)
                os.ftruncate(self._idx_fd, self._idx_size)
            return False
        self._next_seq += lines
        self._offset += len(data)
        self._idx_size += RECORD.size
        return True

    def _count_unwritten(self, data: bytes, lines: int, flags: int) -> None:
        self.unwritten_lines += lines if flags != FLAG_CONTINUED else 0
        self.unwritten_bytes += len(data)

    def close(self) -> None:
        with self._lock:
            for fd in (self._log_fd, self._idx_fd):
                with contextlib.suppress(OSError):
                    os.fsync(fd)
                os.close(fd)


def _reason(error: OSError | None) -> str:
    if error is None:
        return "a write failed"
    return error.strerror or str(error)


def _redrawn_in_place(pending: bytearray) -> bool:
    """True when an unfinished line holds a bare ``\\r`` (one that no ``\\n`` can still follow)."""
    return len(pending) > 1 and pending.find(b"\r", 0, len(pending) - 1) >= 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def count_recorded_lines(idx_path: Path, records: int | None = None) -> int:
    """The seq the next line gets, from the last record (an agent restarts rarely).

    With ``records``, the seq after the first ``records`` records only: a
    reader that counted the records a moment ago asks about those, not about
    records its trainer appended since.
    """
    try:
        size = idx_path.stat().st_size
    except FileNotFoundError:
        return 0
    whole = size - size % RECORD.size
    if records is not None:
        whole = min(whole, records * RECORD.size)
    if whole == 0:
        return 0
    with open(idx_path, "rb") as idx, open(idx_path.with_name("output.log"), "rb") as log:
        idx.seek(whole - RECORD.size)
        stream, flags, length, seq, offset, _ = RECORD.unpack(idx.read(RECORD.size))
        check_record(whole // RECORD.size - 1, stream, flags, length)
        log.seek(offset)
        data = log.read(length)
    if flags == FLAG_CONTINUED:
        return int(seq)
    if flags == FLAG_FINAL_PARTIAL:
        return int(seq) + 1
    return int(seq) + data.count(b"\n")


# --------------------------------------------------------------------------- pumps

READ_CHUNK = 1 << 20
"""The most read at once: the size of the trainer's pipe (see ``platform.enlarge_pipe``)."""
COALESCE_BELOW = 1 << 16
COALESCE_SECONDS = 0.002
"""After a read of under ``COALESCE_BELOW`` bytes, wait this long before the next one.

A trainer that writes line by line (``PYTHONUNBUFFERED=1``) would otherwise
be read one line per read: a wake-up, a record and two writes per line. The
wait batches whatever arrives meanwhile into one read and one record (the
1 MiB pipe holds it), for at most 2 ms of added latency. A larger read means
the trainer floods: the next read follows at once, so the pipe never fills
and the trainer never waits for us. Only where the pipe could be enlarged:
a small pipe would fill during the wait and throttle the trainer."""
BACKLOG_BYTES = 8 << 20
"""Output kept for a listener that is not attached yet; past it the pump waits for one."""

Listener = Callable[[bytes, bytes], None]
"""Called with (complete lines, an unfinished line's latest update) after each write."""


class Pump:
    """Copies one of the trainer's pipes into the run's output, on a thread of its own.

    It writes at once; what it wrote is handed to a listener (the agent's
    event scanner). Until one is attached (the agent is still loading) the
    pieces are kept, up to ``BACKLOG_BYTES``, and handed over in order on
    ``attach``; past that the pump waits, and the pipe holds the trainer.
    """

    def __init__(self, pipe: IO[bytes], stream: int, writer: OutputWriter, coalesce: bool) -> None:
        self._pipe = pipe  # kept: the pipe's file object owns the descriptor read here
        self._stream = stream
        self._writer = writer
        self._coalesce = coalesce
        self._lock = threading.Condition()
        self._listener: Listener | None = None
        self._backlog: list[tuple[bytes, bytes]] = []
        self._backlog_bytes = 0
        self._thread = threading.Thread(target=self._run, name=f"pump-{stream}", daemon=True)

    def start(self) -> Pump:
        self._thread.start()
        return self

    def attach(self, listener: Listener) -> None:
        """Hand what was written so far, then everything as it comes, to ``listener``."""
        with self._lock:
            for complete, update in self._backlog:
                _hand_over(listener, complete, update)
            self._backlog.clear()
            self._backlog_bytes = 0
            self._listener = listener
            self._lock.notify_all()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        reader = io.FileIO(self._pipe.fileno(), closefd=False)
        buffer = bytearray(READ_CHUNK)
        view = memoryview(buffer)
        while True:
            try:
                size = reader.readinto(buffer) or 0
            except OSError:
                size = 0
            if not size:
                break
            self._deliver(*self._writer.append(self._stream, bytes(view[:size])))
            if self._coalesce and size < COALESCE_BELOW:  # a trickle: let the next lines gather
                time.sleep(COALESCE_SECONDS)
        last = self._writer.finish_stream(self._stream)
        if last:
            self._deliver(last, b"")

    def _deliver(self, complete: bytes, update: bytes) -> None:
        if not complete and not update:
            return
        with self._lock:
            while self._listener is None and self._backlog_bytes > BACKLOG_BYTES:
                self._lock.wait()
            if self._listener is None:
                self._backlog.append((complete, update))
                self._backlog_bytes += len(complete) + len(update)
                return
            _hand_over(self._listener, complete, update)


def _hand_over(listener: Listener, complete: bytes, update: bytes) -> None:
    """Call the listener; whatever it raises is logged, and the pump reads on.

    A pump that died would leave the trainer's pipe undrained, and the
    trainer blocked on its next write for good.
    """
    try:
        listener(complete, update)
    except Exception:
        log.exception("the output listener failed; the capture goes on")


def start_pumps(stdout: IO[bytes], stderr: IO[bytes], writer: OutputWriter, coalesce: bool) -> list[Pump]:
    """One pump per stream, started."""
    return [Pump(stdout, STDOUT, writer, coalesce).start(), Pump(stderr, STDERR, writer, coalesce).start()]
