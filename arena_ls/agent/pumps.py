"""The pipe pumps of a job agent: each copies one of the trainer's pipes into the run's output.

Standard library only, like ``run.outputlog`` whose writer they feed: ``launch`` starts them
with the trainer, before the rest of the agent is loaded, and hands them to the agent
(``attach``) once it is; what was written meanwhile is handed over in order.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable
from typing import IO

from arena_ls.agent.read_pacing import ReadPacing
from arena_ls.run.outputlog import STDERR, STDOUT, OutputWriter, Written

log = logging.getLogger("arena_ls.agent")

READ_CHUNK = 1 << 20
"""The most read at once: the size of the trainer's pipe (see ``platform.enlarge_pipe``)."""
BACKLOG_BYTES = 8 << 20
"""Output kept for a listener that is not attached yet; past it the pump waits for one."""

Listener = Callable[[Written], None]
"""Called with what each write recorded (complete lines, whether quiet, an unfinished line's update)."""


class Pump:
    """Copies one of the trainer's pipes into the run's output, on a thread of its own.

    It writes at once; what it wrote is handed to a listener (the agent's
    event scanner). Until one is attached (the agent is still loading) the
    pieces are kept, up to ``BACKLOG_BYTES``, and handed over in order on
    ``attach``; past that the pump waits, and the pipe holds the trainer.
    """

    def __init__(self, pipe: IO[bytes], stream: int, writer: OutputWriter, pipe_bytes: int = 0) -> None:
        self._pipe = pipe  # kept: the pipe's file object owns the descriptor read here
        self._stream = stream
        self._writer = writer
        self._pacing = ReadPacing(pipe_bytes)  # 0: the pipe's size is unknown, never wait
        self._lock = threading.Condition()
        self._listener: Listener | None = None
        self._backlog: list[Written] = []
        self._backlog_bytes = 0
        self._thread = threading.Thread(target=self._run, name=f"pump-{stream}", daemon=True)

    def start(self) -> Pump:
        self._thread.start()
        return self

    def attach(self, listener: Listener) -> None:
        """Hand what was written so far, then everything as it comes, to ``listener``."""
        with self._lock:
            for written in self._backlog:
                _hand_over(listener, written)
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
            written = self._append(bytes(view[:size]))
            if written is not None:
                self._deliver(written)
            wait = self._pacing.wait_after(size)
            if wait:  # a trickle: let the next lines gather
                time.sleep(wait)
        last = self._writer.finish_stream(self._stream)
        if last:
            self._deliver(Written(last, False, b""))

    def _append(self, data: bytes) -> Written | None:
        """The writer's record of ``data``; None, logged, where the writer failed in a way of its
        own (its full disk it counts itself): the pump reads on whatever happens, or the trainer
        would block on its next write for good."""
        try:
            return self._writer.append(self._stream, data)
        except Exception:
            log.exception("the output log failed to record %d bytes; the capture goes on", len(data))
            return None

    def _deliver(self, written: Written) -> None:
        if not written.complete and not written.update:
            return
        with self._lock:
            while self._listener is None and self._backlog_bytes > BACKLOG_BYTES:
                self._lock.wait()
            if self._listener is None:
                self._backlog.append(written)
                self._backlog_bytes += len(written.complete) + len(written.update)
                return
            _hand_over(self._listener, written)


def _hand_over(listener: Listener, written: Written) -> None:
    """Call the listener; whatever it raises is logged, and the pump reads on.

    A pump that died would leave the trainer's pipe undrained, and the
    trainer blocked on its next write for good.
    """
    try:
        listener(written)
    except Exception:
        log.exception("the output listener failed; the capture goes on")


def start_pumps(stdout: IO[bytes], stderr: IO[bytes], writer: OutputWriter, pipe_bytes: int) -> list[Pump]:
    """One pump per stream, started; ``pipe_bytes``, the pipes' capacity, bounds their waits."""
    pipes = ((stdout, STDOUT), (stderr, STDERR))
    return [Pump(pipe, stream, writer, pipe_bytes).start() for pipe, stream in pipes]
