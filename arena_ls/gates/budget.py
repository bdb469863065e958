"""The gates with a time and memory budget, off the server's process (issue 39 item 6).

A hostile trainer (200,000-deep nesting, 50,000 lines, 2.6 MB, 20,000
decorators) took seconds of CPU and hundreds of MB to lint, in a thread of
the server: the event loop waited for the GIL, status for the lints, and the
server's memory grew to 760 MB. A thread cannot be stopped; a process can.
So every lint the server asks for runs in one worker process
(``arena_ls.gates.worker``), one at a time, while a thread of the server
watches the clock and the worker's memory: past ``GATE_SECONDS`` or
``GATE_MEMORY_MB`` the worker is killed (a new one starts at the next lint)
and the file gets one AR000 finding saying it was too large or too deep to
check. A file larger than ``GATE_MAX_BYTES`` gets it without being sent.
Error severity: a trainer the gates could not check cannot be approved, so
RUN stays gated.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import subprocess
import sys
import threading
import time
from typing import BinaryIO

import psutil

from arena_ls import platform
from arena_ls.gates.model import Finding
from arena_ls.gates.worker import read_message, write_message
from arena_ls.trainer_facts.job_args import JobArgs

log = logging.getLogger(__name__)

GATE_SECONDS = 8.0
"""Wall time one lint may take in the worker (a 3,000-line trainer takes under a second on a
loaded 2-core machine; the hostile files of issue 39 up to six)."""
GATE_MEMORY_MB = 400
"""Resident memory the worker may reach while it lints (a big trainer needs under 150 MB)."""
GATE_MAX_BYTES = 2 << 20
"""A trainer larger than this is not parsed at all."""
WATCH_SECONDS = 0.02
"""How often the worker's clock and memory are looked at while it lints."""


def too_large(reason: str) -> Finding:
    """The one finding of a file past the budget (AR000: no other gate could run)."""
    return Finding(
        code="AR000",
        message=(
            f"the gates could not check this trainer: {reason}; it cannot run until it is "
            "small and shallow enough to check"
        ),
        severity="error",
        line=0,
        col=0,
        end_line=0,
        end_col=0,
    )


class GateBudget:
    """One worker process that lints, each lint within the budget (thread-safe: one at a time)."""

    def __init__(
        self, seconds: float = GATE_SECONDS, memory_mb: int = GATE_MEMORY_MB, max_bytes: int = GATE_MAX_BYTES
    ) -> None:
        self.seconds = seconds
        self.memory_mb = memory_mb
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self.peak_rss_mb = 0.0
        """The worker's largest resident memory seen (benchmarks read it)."""

    def lint(
        self,
        source: str | bytes,
        fp32_only: bool | None,
        checkpoint_patterns: tuple[str, ...],
        jobs: tuple[JobArgs, ...] = (),
    ) -> list[Finding]:
        size = len(source) if isinstance(source, bytes) else len(source.encode("utf-8", "surrogatepass"))
        if size > self.max_bytes:
            return [too_large(f"it is {size / (1 << 20):.1f} MB, more than {self.max_bytes >> 20} MB")]
        request = pickle.dumps((source, fp32_only, list(checkpoint_patterns), list(jobs)))
        with self._lock:
            return self._ask(request)

    def close(self) -> None:
        """Kill the worker now (the server is leaving; a lint in flight answers too-large)."""
        self._stop()

    def _ask(self, request: bytes) -> list[Finding]:
        process = self._worker()
        answer: list[bytes | None] = []
        done = threading.Event()
        assert process.stdin is not None and process.stdout is not None
        outbox: BinaryIO = process.stdout  # type: ignore[assignment]

        def receive() -> None:
            with contextlib.suppress(OSError, ValueError):
                answer.append(read_message(outbox))
            done.set()

        reader = threading.Thread(target=receive, name="gate-worker-answer", daemon=True)
        reader.start()
        try:
            write_message(process.stdin, request)  # type: ignore[arg-type]
        except OSError:
            self._stop()
            return [too_large("the gates' worker could not be reached")]
        reason = self._watch(process, done)
        if reason is not None:
            self._stop()
            reader.join(timeout=1.0)
            return [too_large(reason)]
        reader.join()
        body = answer[0] if answer else None
        if body is None:  # the worker died (a crash of the parser, a signal): say so, start anew
            self._stop()
            return [too_large("the gates' worker ended while checking it")]
        findings: list[Finding] = pickle.loads(body)
        return findings

    def _watch(self, process: subprocess.Popen[bytes], done: threading.Event) -> str | None:
        """Why the lint must stop (past the budget), or None once it has answered."""
        deadline = time.monotonic() + self.seconds
        try:
            watched = psutil.Process(process.pid)
        except psutil.Error:
            watched = None
        while not done.wait(WATCH_SECONDS):
            if time.monotonic() > deadline:
                return f"checking it took longer than {self.seconds:.0f} s"
            if watched is not None:
                try:
                    rss = watched.memory_info().rss / (1 << 20)
                except psutil.Error:
                    continue
                self.peak_rss_mb = max(self.peak_rss_mb, rss)
                if rss > self.memory_mb:
                    return f"checking it needed more than {self.memory_mb} MB"
        return None

    def _worker(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is None or process.poll() is not None:
            process = self._process = subprocess.Popen(
                [sys.executable, "-m", "arena_ls.gates.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=None,  # the server's stderr: its log
                creationflags=platform.helper_process_flags(),
            )
        return process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5.0)
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
