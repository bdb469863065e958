"""The local trainer's output: its lines scanned for progress and checkpoints, its tail, stalls.

Part of ``LocalTrainer`` (``local_trainer``), moved out of the job agent: what a
pump wrote is scanned here, on the pump's thread, under the run's lock.
"""

from __future__ import annotations

import errno
import threading
import time
from collections import deque

from arena_ls.agent.announcements import apply_checkpoint, apply_progress
from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.local.stall import StallWatch
from arena_ls.agent.rollback import SpikeWatch
from arena_ls.agent.statewriter import StateWriter
from arena_ls.agent.trainer_voice import TrainerVoice
from arena_ls.run.events import Checkpoint, EventParser, Progress
from arena_ls.run.outputlog import OutputWriter, Written
from arena_ls.run.rundir import Failure, RunSpec, RunState
from arena_ls.run.states import RunStatus

FULL_SCAN_BYTES = 1 << 16
FULL_SCAN_SECONDS = 0.25
"""Chunks over ``FULL_SCAN_BYTES`` (a flood) get every line parsed at most this often.

In between, ``EventParser.parse_flood`` finds every announcement but looks
for progress only at the chunk's end: progress is a level, its latest value
wins, and a flood must not cost a decode and a regex per line."""
PROGRESS_WRITE_INTERVAL = 1.0
TAIL_LINES = 200
STALLED = "stalled"
"""``failure.kind`` of a stalled trainer (contract 8.2)."""
TAIL_BYTES = 16384
"""Of each chunk, the end kept raw for ``tail_lines`` (decoded only when a failure is judged)."""


class TrainerOutput(TrainerVoice):
    """What the trainer printed, as the run's state sees it (the base of ``LocalTrainer``)."""

    record: RunRecord
    spec: RunSpec
    state: RunState
    lock: threading.RLock
    writer: StateWriter
    parser: EventParser
    tail_chunks: deque[tuple[bytes, bool]]
    """The trainer's latest output as (piece, starts mid-line), newest last."""
    attempt_announced: bool
    """The current attempt announced progress or a checkpoint (a refusal to resume did not)."""
    last_progress_at: float
    last_progress_write: float
    last_full_scan: float
    nan_evidence: str | None
    output: OutputWriter
    spike_watch: SpikeWatch | None
    spike_pending: int | None
    disk_evidence: str | None
    seen_write_failures: int
    stall_watch: StallWatch

    def _move(self, target: RunStatus) -> None:
        """Change the status; the writer records it (a failing write never aborts the run)."""
        self.record.move(target)

    def _save(self) -> None:
        """Ask the writer to record the state; never writes on the calling thread (a pump's, say)."""
        self.writer.request()

    def _checkpoint_step(self) -> int | None:
        return self.record.checkpoint_step()

    # -- the disk: a write that fails for lack of space is ``disk-full`` ----------------------

    def _write_failed(self, error: Exception) -> None:
        """The writer's report of a failed write (it retries): a lack of space is ``disk-full`` at once."""
        if isinstance(error, OSError):
            with self.lock:
                self._disk_trouble(f"state.json could not be written: {error}", error)

    def _disk_trouble(self, evidence: str, error: OSError | None) -> None:
        """A write failed: with no space left, the run reports ``disk-full`` at once (in memory first)."""
        if error is None or error.errno not in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return
        if self.disk_evidence is None:
            self.disk_evidence = evidence
            self.warn(f"{evidence}; the trainer keeps running")
        if self.state.failure is None:
            self.state.failure = Failure("disk-full", self.disk_evidence)

    def _check_writes(self) -> None:
        """Notice failed log writes; clear ``disk-full`` once every line and the state are written."""
        failures = self.output.write_failures
        if failures > self.seen_write_failures:
            self.seen_write_failures = failures
            error = self.output.last_error
            with self.lock:
                self._disk_trouble(f"output.log could not be written: {error}", error)
            self.writer.request()
        if self.disk_evidence is None or self.output.unwritten_lines or self.writer.failing:
            return
        with self.lock:
            failure = self.state.failure
            if failure is not None and failure.kind == "disk-full":
                self.state.failure = None
            self.disk_evidence = None
        self.say("writes succeed again: the disk has space")
        self.writer.request()

    # -- the trainer's lines --------------------------------------------------------------

    def _on_output(self, written: Written) -> None:
        """What a pump wrote: scan finished lines and in-place updates for events."""
        if written.complete:
            self._scan(written.complete, written.quiet)
        if written.update:
            self._scan_update(written.update)

    def _scan(self, complete: bytes, quiet: bool = False) -> None:
        """``quiet``: the writer found nothing but progress can be in these lines (``FLAG_QUIET``)."""
        if len(complete) <= TAIL_BYTES:
            self.tail_chunks.append((complete, False))
        else:  # a flood: keep only the chunk's end, without decoding it
            self.tail_chunks.append((complete[-TAIL_BYTES:], True))
        now = time.monotonic()
        if len(complete) <= FULL_SCAN_BYTES or now - self.last_full_scan >= FULL_SCAN_SECONDS:
            self.last_full_scan = now
            events = self.parser.parse_chunk(complete)
        elif quiet:
            events = self.parser.parse_quiet(complete)
        else:
            events = self.parser.parse_flood(complete)
        for event in events:
            if isinstance(event, Checkpoint):
                self._on_checkpoint(event)
            elif isinstance(event, Progress):
                self._on_progress(event)
        self._tell_protocol()

    def _tell_protocol(self) -> None:
        """A trainer of another ``@arena`` protocol is told so once a run, never failed (contract 8.1)."""
        note = self.parser.take_protocol_note()
        if note is not None:
            self.warn(note)

    def _scan_update(self, update: bytes) -> None:
        """An unfinished line redrawn in place (a progress bar): its latest state."""
        segments = [part for part in update.split(b"\r") if part.strip()]
        if segments:
            event = self.parser.parse_safely(segments[-1].decode("utf-8", "replace"))
            if isinstance(event, Progress):
                self._on_progress(event)
            self._tell_protocol()

    def tail_lines(self) -> list[str]:
        """The trainer's last ``TAIL_LINES`` lines, decoded (the failure's evidence)."""
        lines: list[str] = []
        for piece, cut in reversed(list(self.tail_chunks)):  # a copy: the pumps append meanwhile
            raws = piece.splitlines()[1:] if cut else piece.splitlines()
            wanted = TAIL_LINES - len(lines)
            lines[:0] = [raw.decode("utf-8", "replace") for raw in raws[-wanted:]]
            if len(lines) >= TAIL_LINES:
                break
        return lines

    def _on_checkpoint(self, event: Checkpoint) -> None:
        with self.lock:
            self.attempt_announced = True
            record = apply_checkpoint(event, self.spec.run_id, self.record, self.state)
        self.writer.request(job_checkpoint=(self.spec.job_id, record))

    def _on_progress(self, event: Progress) -> None:
        now = time.monotonic()
        with self.lock:
            self.attempt_announced = True
            self.last_progress_at = now
            known = self.nan_evidence
            self.nan_evidence = apply_progress(event, self.record, self.state, known)
            if self.nan_evidence is not None and known is None:
                self.warn(self.nan_evidence)
            watch = self.spike_watch
            if watch is not None and watch.observe(event.loss) and self.spike_pending is None:
                self.spike_pending = event.step  # the supervise loop acts on it (``_check_rollback``)
            if self.stall_watch.progress(event.step, now) or self.state.stalled:
                self._stall_ended()
            elif now - self.last_progress_write >= PROGRESS_WRITE_INTERVAL:
                self.last_progress_write = now
                self._save()

    # -- stall (contract 8.2: ``stall``, ``local_stall``) ------------------------------------------

    def _stall_ended(self) -> None:
        """Progress came after a stall (under the lock): ``stalled`` and its failure are cleared."""
        self.state.stalled = False
        if self.state.failure is not None and self.state.failure.kind == STALLED:
            self.state.failure = None
        self.say("progress resumed")
        self._save()
