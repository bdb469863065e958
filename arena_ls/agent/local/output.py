"""The local trainer's output: its lines scanned for progress and checkpoints, its tail, the disk.

Owned by ``LocalTrainer`` (``trainer``): what a pump wrote is scanned here, on the pump's thread;
each announcement goes to the run's ``Announcements`` handler (``agent/announcements.py``, the
one the cluster's log copy uses too), whose watch here is the stall and loss-spike watches.
"""

from __future__ import annotations

import errno
import time
from collections import deque

from arena_ls.agent.announcements import Announcements
from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.local.stall import StallWatch
from arena_ls.agent.rollback import SpikeWatch
from arena_ls.agent.statewriter import StateWriter
from arena_ls.run.outputlog import OutputWriter, Written
from arena_ls.run.rundir import Failure
from arena_ls.run.trainer_announcements import Progress

FULL_SCAN_BYTES = 1 << 16
FULL_SCAN_SECONDS = 0.25
"""Chunks over ``FULL_SCAN_BYTES`` (a flood) get every line parsed at most this often.

In between, ``EventParser.parse_flood`` finds every announcement but looks
for progress only at the chunk's end: progress is a level, its latest value
wins, and a flood must not cost a decode and a regex per line."""
TAIL_LINES = 200
STALLED = "stalled"
"""``failure.kind`` of a stalled trainer (contract 8.2)."""
TAIL_BYTES = 16384
"""Of each chunk, the end kept raw for ``tail_lines`` (decoded only when a failure is judged)."""


class OutputTail:
    """The trainer's latest output, kept raw and decoded only when asked (a failure's evidence)."""

    def __init__(self) -> None:
        self.chunks: deque[tuple[bytes, bool]] = deque(maxlen=TAIL_LINES)
        """The trainer's latest output as (piece, starts mid-line), newest last."""

    def add(self, complete: bytes) -> None:
        if len(complete) <= TAIL_BYTES:
            self.chunks.append((complete, False))
        else:  # a flood: keep only the chunk's end, without decoding it
            self.chunks.append((complete[-TAIL_BYTES:], True))

    def lines(self) -> list[str]:
        """The trainer's last ``TAIL_LINES`` lines, decoded (the failure's evidence)."""
        lines: list[str] = []
        for piece, cut in reversed(list(self.chunks)):  # a copy: the pumps append meanwhile
            raws = piece.splitlines()[1:] if cut else piece.splitlines()
            wanted = TAIL_LINES - len(lines)
            lines[:0] = [raw.decode("utf-8", "replace") for raw in raws[-wanted:]]
            if len(lines) >= TAIL_LINES:
                break
        return lines


class TrainerOutput:
    """What the trainer printed, as the run's state sees it (``LocalTrainer`` owns one)."""

    def __init__(
        self,
        record: RunRecord,
        writer: StateWriter,
        output: OutputWriter,
        tail: OutputTail,
        stall_watch: StallWatch,
    ) -> None:
        self.record = record
        self.spec = record.spec
        self.state = record.state
        self.lock = record.lock
        self.writer = writer
        writer.report_failures_to(self._write_failed)  # a full disk is ``disk-full`` at once
        self.output = output
        self.tail = tail
        self.stall_watch = stall_watch
        self.announcements = Announcements(record, writer, watch=self._watch_progress)
        self.last_full_scan = 0.0
        self.spike_watch = SpikeWatch(self.spec.rollback) if self.spec.rollback else None
        """The current attempt's losses, judged as they come (loss-spike rollback, contract 8.2)."""
        self.spike_pending: int | None = None
        """A spike's step the stop protocol has yet to act on (set on a pump's thread)."""
        self.disk_evidence: str | None = None
        self.seen_write_failures = 0

    def new_attempt(self) -> None:
        """A new attempt, a new window of losses for the spike watch."""
        if self.spec.rollback is not None:
            self.spike_watch = SpikeWatch(self.spec.rollback)
            self.spike_pending = None

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
            self.record.warn(f"{evidence}; the trainer keeps running")
        if self.state.failure is None:
            self.state.failure = Failure("disk-full", self.disk_evidence)

    def check_writes(self) -> None:
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
        self.record.say("writes succeed again: the disk has space")
        self.writer.request()

    # -- the trainer's lines --------------------------------------------------------------

    def on_output(self, written: Written) -> None:
        """What a pump wrote: scan finished lines and in-place updates for events."""
        if written.complete:
            self._scan(written.complete, written.quiet)
        if written.update:
            self._scan_update(written.update)

    def _scan(self, complete: bytes, quiet: bool = False) -> None:
        """``quiet``: the writer found nothing but progress can be in these lines (``FLAG_QUIET``)."""
        self.tail.add(complete)
        parser = self.announcements.parser
        now = time.monotonic()
        if len(complete) <= FULL_SCAN_BYTES or now - self.last_full_scan >= FULL_SCAN_SECONDS:
            self.last_full_scan = now
            events = parser.parse_chunk(complete)
        elif quiet:
            events = parser.parse_quiet(complete)
        else:
            events = parser.parse_flood(complete)
        for event in events:
            self.announcements.handle(event)
        self.announcements.tell_protocol()

    def _scan_update(self, update: bytes) -> None:
        """An unfinished line redrawn in place (a progress bar): its latest state."""
        segments = [part for part in update.split(b"\r") if part.strip()]
        if segments:
            event = self.announcements.parser.parse_safely(segments[-1].decode("utf-8", "replace"))
            if isinstance(event, Progress):
                self.announcements.progress(event)
            self.announcements.tell_protocol()

    def _watch_progress(self, event: Progress, now: float) -> bool:
        """The local watches of a progress announcement (under the lock): the loss spike, the end of
        a stall; True when the state was written here."""
        watch = self.spike_watch
        if watch is not None and watch.observe(event.loss) and self.spike_pending is None:
            self.spike_pending = event.step  # the stop protocol acts on it (``check_rollback``)
        if self.stall_watch.progress(event.step, now) or self.state.stalled:
            self._stall_ended()
            return True
        return False

    # -- stall (contract 8.2: ``stall``, ``local_stall``) ------------------------------------------

    def _stall_ended(self) -> None:
        """Progress came after a stall (under the lock): ``stalled`` and its failure are cleared."""
        self.state.stalled = False
        if self.state.failure is not None and self.state.failure.kind == STALLED:
            self.state.failure = None
        self.record.say("progress resumed")
        self.writer.request()
