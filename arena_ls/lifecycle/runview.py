"""A server's view of one run, rebuilt from the run's folder at any time.

Any server process builds the same view from disk: the agent's state file,
the captured output and its index. The view follows the files (new lines,
status changes) and decides when a run whose agent died is ``lost``.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import struct
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from arena_ls.lifecycle.backends.base import AgentProcess, RunBackend
from arena_ls.lifecycle.backends.local import LocalBackend
from arena_ls.lifecycle.checkpoint_age import note_checkpoint
from arena_ls.lifecycle.health_line import HealthPoint
from arena_ls.lifecycle.progress_speed import ProgressTracker
from arena_ls.lifecycle.records import AgentLine, Item, RunRecords
from arena_ls.run.capture import Cursor, LogLine, OutputReader, Page
from arena_ls.run.rundir import CorruptState, Failure, RunDir, RunSpec, RunState, StateBusy, unstructure
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from arena_ls.run.trainer_announcements import Checkpoint, EventParser, Progress

MACHINE_RESTARTED = "machine-restarted"
"""``failure.kind`` of a run whose machine restarted under it (``lifecycle/reboot.py``)."""

log = logging.getLogger(__name__)

RING_LINES = 2000
"""Lines of each run kept in memory; the files on disk keep everything."""
FINAL_RING_LINES = 50
"""Lines of an ended run read when it is adopted (``arena/status`` shows 50, a stop 20)."""
MAX_LINES_PER_POLL = 5000
BACKLOG_JUMP_BYTES = 64 << 10
"""Past this much unread output, the live view skips to the tail (the disk keeps all).

About what one poll can pass on under the ``arena/log`` rate bound: reading
more would only be dropped by the batcher, and under a flood it takes the
CPU that the trainer and its agent need."""
JUMP_KEEP_LINES = 200
"""Lines read before the end after a jump (the status tail shows 50)."""
ADOPT_RECORD_BYTES = 8 << 20
ADOPT_READ_SECONDS = 0.02
"""CPU the adopting read of the tail's records spends at most, on the event loop: a run adopted
while its log is still being written (or whose tail cursor fell back to the log's start) can hold
megabytes of announcements there; the rest is read by the next polls, 4 ms each."""
"""What adopting reads of the tail's records at once, unhurried (as much as its lines' read)."""
AGENT_START_GRACE = 30.0
DISK_FULL_BYTES = 64 << 10
"""A filesystem with less free space than this counts as full: the run's writes fail."""


@attrs.frozen
class LineBatch:
    """What ``RunView.read_batch`` read: taken by ``apply_batch`` only while the view's cursor is
    still ``start`` (compared by identity: every read makes a new cursor)."""

    start: Cursor
    page: Page
    skipped: int
    """Lines jumped over (a flood's backlog): they join the client's summary line."""


def _parser_of(spec: RunSpec) -> EventParser:
    return EventParser.for_patterns(spec.progress_pattern, spec.checkpoint_pattern)


class ViewSubscription:
    """A view's own subscription to its records, through a weak reference.

    A view and its records must not hold each other: every view read for one
    answer (a page of 700 old runs, ``Supervisor.read_view``) was then freed
    only by a full garbage collection, which took the event loop 108-134 ms
    under load (issue 24). Without the cycle a view goes when its last
    reference does."""

    __slots__ = ("view",)

    def __init__(self, view: RunView) -> None:
        self.view = weakref.ref(view)

    def take(self, item: Item) -> None:
        view = self.view()
        if view is not None:
            view.take(item)


class RunView:
    """What a server knows of one run."""

    def __init__(
        self,
        run_dir: RunDir,
        spec: RunSpec,
        agent: AgentProcess | None = None,
        *,
        backend: RunBackend | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.spec = spec
        self.agent = agent
        """The run's agent (the job agent, or a cluster run's agent) when this server started it."""
        self.backend: RunBackend = backend if backend is not None else LocalBackend()
        """Where the run executes (``spec.backend``)."""
        self.state: RunState | None = None
        self.state_signature: tuple[int, int, int, int] | None = None
        self.busy = False
        """state.json was held open by another process at the last read (Windows): retried, not damage."""
        self.reader = OutputReader(run_dir.path)
        self.cursor: Cursor = self.reader.start()
        self.ring: deque[LogLine] = deque(maxlen=RING_LINES)
        self.progress = ProgressTracker()
        self.records = RunRecords(run_dir.path, functools.partial(_parser_of, spec))
        """The one reader of the run's records: this view's progress and checkpoints, the insights'
        observations (``lifecycle.records``); the lines above are the log's, for ``arena/log``."""
        self.subscription = ViewSubscription(self)
        self.records.subscribe(self.subscription)
        self.unsummarised = 0
        """Lines jumped over that the client has not been told about yet."""
        self.problem: str | None = None
        self.damage: str | None = None
        """What is wrong with the run's files (``failure.kind`` ``damaged``), or None."""
        self.placeholder = False
        """``spec`` is made up from the folder's name: its own spec.json cannot be read."""
        self.damaged_but_live = False
        """Damaged, yet its agent lives (it keeps its recorded status until it ends)."""
        self.disk_full: str | None = None
        """Set while the run's filesystem has no space left (``failure.kind`` ``disk-full``)."""
        self.agent_exit: int | None = None
        """The exit code of the agent this server started, once it has ended."""
        self.revival_claim: str | None = None
        """The claim under which this server revived the run's agent (kept: one revival per dead one)."""
        self.notified: Any = None
        """The state as last announced to the client (see ``Supervisor.notify_if_changed``)."""
        self.drained = False
        """Ended and read to its end: the follower looks at it only on its once-a-second round."""
        self.seen_checkpoint: Checkpoint | None = None
        """The last checkpoint announced in the lines this view read: a trainer can announce one
        while its agent is still loading, which records it in the state only then."""
        self.recent_checkpoints: deque[tuple[int, float]] = deque(maxlen=2)
        """The last two checkpoints announced in those lines, ``(step, at)``: the run's cadence."""

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def parser(self) -> EventParser:
        """The parser of the run's one records reader (its ``speaks_arena`` as read so far)."""
        return self.records.parser

    def new_parser(self) -> EventParser:
        """A parser of this run's trainer lines (the job's patterns), from the log's start."""
        return _parser_of(self.spec)

    @property
    def status(self) -> RunStatus:
        if self.damage is not None and not self.damaged_but_live:
            return RunStatus.LOST  # its files are damaged and no agent of it lives
        return self.state.status if self.state is not None else RunStatus.STARTING

    @property
    def is_final(self) -> bool:
        return self.status.is_final

    # -- following the files -----------------------------------------------------------

    def refresh_state(self, *, force: bool = False) -> None:
        """Re-read state.json if it changed (``Supervisor.notify_if_changed`` tells the client).

        A change is seen by the file's signature (mtime, size, inode, ctime),
        not by its mtime alone, which FAT32/exFAT keep to 2 s; ``force``
        re-reads anyway. A state older than the one held (its ``generation``)
        is ignored.
        """
        signature = self.run_dir.state_signature()
        if signature == self.state_signature and not force:
            return
        try:
            state = self.run_dir.read_state()
        except FileNotFoundError:
            return
        except StateBusy as error:
            log.info("run %s: %s; read again later", self.run_id, error)
            self.busy = True
            return
        except CorruptState as error:
            if self.problem is None:
                log.warning("run %s: %s", self.run_id, error)
            self.problem = str(error)
            if self.state is None:  # nothing known of it: the run is damaged
                self.damage = self.damage or _name_file(str(error), self.run_dir)
            return
        if self.problem is not None and self.damage == _name_file(self.problem, self.run_dir):
            self.damage = None  # rewritten whole since (by its agent)
        self.problem = None
        self.busy = False
        self.state_signature = signature
        if self.state is None or state.generation >= self.state.generation or state.generation == 0:
            self.state = state

    def mark_damaged(self, evidence: str) -> None:
        """The run's files are damaged: keep the first evidence."""
        if self.damage is None:
            self.damage = evidence
            self._check_damaged_live()

    def retry_damaged(self) -> None:
        """Look at a damaged run's files again: damage repaired since (a state rewritten) clears it."""
        self.refresh_state(force=True)
        self._check_damaged_live()

    def _check_damaged_live(self) -> None:
        state = self.state
        self.damaged_but_live = state is not None and not state.status.is_final and self.agent_alive()

    def snapshot(self) -> Any:
        """What a client is told about: the recorded state and the status."""
        state = unstructure(self.state) if self.state is not None else None
        return (self.status.value, state, self.damage, self.disk_full)

    def start_live_at_tail(self) -> None:
        """Adopting: fill the ring with the last lines, follow from there.

        A damaged index is read from its start, as far as it goes. An ended run
        keeps only its last ``FINAL_RING_LINES`` (all a status or a stop shows):
        the history's views stay small."""
        try:
            self.cursor = self.reader.tail_cursor(FINAL_RING_LINES if self.is_final else RING_LINES)
        except (OSError, ValueError, struct.error):
            self.cursor = self.reader.start()
        self.records.start_at(self.cursor.record)
        self.read_new_lines(notify=False)
        self.records.read_new(max_bytes=ADOPT_RECORD_BYTES, budget=ADOPT_READ_SECONDS)  # the tail's progress

    def read_new_lines(self, *, notify: bool = True) -> list[LogLine]:
        """New complete lines since the last call (bounded per call)."""
        lines = self.apply_batch(self.read_batch(), notify=notify)
        return lines if lines is not None else []

    def read_batch(self, *, records: bool = False) -> LineBatch:
        """The lines written since the cursor, without changing the view (their announcements are the
        records reader's, read when the batch is applied: ``RunRecords.read_new`` is bounded).

        Files only: the follower calls it on a worker thread during a round
        (a flood's reading and scanning never holds the event loop), and
        ``apply_batch`` takes the result on the loop. Past ``BACKLOG_JUMP_BYTES``
        of unread output the read starts ``JUMP_KEEP_LINES`` before the end.

        ``records`` (the follower's rounds during a flood): the run's new records are read and
        decoded here too (``RunRecords.read_ahead``), and ``apply_batch`` only hands their items
        out: a flood's records never cost the loop their decoding."""
        start = cursor = self.cursor
        if self._backlog_bytes(cursor) > BACKLOG_JUMP_BYTES:
            try:
                jump = self.reader.tail_cursor(JUMP_KEEP_LINES)
            except (OSError, ValueError, struct.error):
                jump = cursor  # damaged: read on from here, as far as it goes
            if jump.seq > cursor.seq:
                cursor = jump
        page = self.reader.read(cursor, MAX_LINES_PER_POLL)
        if records:
            self.records.read_ahead()
        return LineBatch(start, page, cursor.seq - start.seq)

    def apply_batch(self, batch: LineBatch, *, notify: bool = True) -> list[LogLine] | None:
        """Take a ``read_batch`` result: its lines (empty unless ``notify``), or None when another
        read moved the cursor since the batch was read (that read took these lines)."""
        if batch.start is not self.cursor:
            return None
        page = batch.page
        if notify:
            self.unsummarised += batch.skipped
        if page.reset is not None:
            log.warning("run %s: %s", self.run_id, page.reset)
        if page.damage is not None:
            self.mark_damaged(page.damage)
        self.cursor = page.cursor
        self.ring.extend(page.lines)
        self.records.deliver()  # what a read ahead decoded (``read_batch``)
        if self.cursor.record > self.records.next_record or not self.records.caught_up:
            self.records.read_new()
        return page.lines if notify else []

    def read_announcements_of_lines(self) -> None:
        """Have the records reader reach the lines read (a decision that consults ``seen_checkpoint``:
        a checkpoint line the client was shown is known here too). Each read is bounded; a backlog
        the reader was catching up over several polls is read now, at once (waiting for a read
        ahead that the follower's worker is doing)."""
        while self.records.next_record < self.cursor.record:
            before = self.records.next_record
            self.records.read_new(wait=True)
            if self.records.next_record == before:
                return  # damaged from there on: nothing more to read

    def records_behind(self) -> bool:
        """The records reader has not reached the lines read (a backlog), or a late subscriber is
        still being caught up (read from any thread: a stale answer only moves a read)."""
        return self.records.next_record < self.cursor.record or not self.records.caught_up

    def read_to_end(self) -> bool:
        """Both the log's lines and the run's records are read to the end of its index."""
        count = self.reader.record_count()
        return self.cursor.record >= count and self.records.next_record >= count

    def take_unsummarised(self) -> int:
        """Lines skipped since the last call, for the client's summary line."""
        skipped, self.unsummarised = self.unsummarised, 0
        return skipped

    def _backlog_bytes(self, cursor: Cursor) -> int:
        """Bytes of output written past ``cursor`` (across the log's segments)."""
        return self.reader.backlog_bytes(cursor)

    def take(self, item: Item) -> None:
        """One item of the run's records (``RunRecords``): progress, checkpoints, relaunches."""
        if isinstance(item, AgentLine):
            if item.event.is_launch:
                self.progress.reset_speed()
            elif item.event.is_relaunch:
                self.progress.rewind(item.event.step or 0)
            return
        if isinstance(item, HealthPoint):
            return
        event = item.event
        if isinstance(event, Progress):
            self.progress.update(event.step, event.total, event.loss, event.lr, item.at)
        elif isinstance(event, Checkpoint):
            self.seen_checkpoint = event
            note_checkpoint(self.recent_checkpoints, event.step, item.at)

    # -- liveness --------------------------------------------------------------------------

    def reap_agent(self) -> None:
        """Collect our agent's exit status once it has ended, so no zombie of ours lingers."""
        if self.agent is not None and (code := self.agent.poll()) is not None:
            self.agent_exit = code
            self.agent = None

    def agent_alive(self) -> bool:
        """Whether the run's agent (the job agent, or a cluster run's agent) lives."""
        return self.backend.agent_alive(self.state, self.agent)

    def check_lost(
        self, folder: StateFolder, restarted: Callable[[RunSpec], str | None] | None = None
    ) -> bool:
        """Mark an unfinished run whose agent is gone as ``lost``; True when it did.

        A back end whose runs outlive their agent (a cluster) is asked
        for a new one first. A local trainer dies with its agent (Linux:
        PDEATHSIG; Windows: the job object); should any of its tree survive,
        the back end kills it here, so no trainer runs unmanaged. Only one
        server records the verdict. ``restarted`` says whether the machine
        restarted since the run's launch (``lifecycle/reboot.py``): then the
        run ends ``crashed`` with ``failure.kind`` ``machine-restarted``.
        """
        if self.damage is not None:
            self.free_if_damaged(folder)
            return False  # a damaged run is never written to: its files stay as found
        if self.is_final:
            return False
        if self.state is None:
            if time.time() - self.spec.created_at < AGENT_START_GRACE or self.agent_alive():
                return False
            self.state = RunState(run_id=self.run_id, job_id=self.spec.job_id)
        elif self.agent_alive():
            return False
        self.refresh_state(force=True)  # the agent may have written its final state as it exited
        if self.is_final or self.busy:
            return False
        state = self.state
        assert state is not None
        if self.backend.revivable:
            return self._revive(state, folder)
        restart = restarted(self.spec) if restarted is not None else None
        if not self.run_dir.claim_once("verdict"):
            return False
        if restart is not None:
            self._record_ended(state, folder, RunStatus.CRASHED, Failure(MACHINE_RESTARTED, restart))
            return True
        self._record_lost(state, folder, "the job agent is gone and recorded no exit status")
        return True

    def _revive(self, state: RunState, folder: StateFolder) -> bool:
        """Start a new agent for a run that outlives its last (one server per dead agent).

        False while the run goes on (revived here or by another server);
        True when it could not be revived and was recorded ``lost``. The
        claim is keyed on the dead agent (pid and creation time) and never
        dropped: a new agent that ends before it recorded itself (its exit
        says it failed, or it stays unrecorded for ``AGENT_START_GRACE``, even
        after the server that started it went away) makes the run ``lost``,
        never a second revival of the same dead agent.
        """
        claim = f"revive-{state.agent_pid}-{state.agent_create_time}"
        if self.run_dir.claim_once(claim):
            agent = self.backend.revive(self.run_dir, state)
            if agent is None:
                self._record_lost(state, folder, "its agent is gone and a new one could not be started")
                return True
            log.info("run %s: its agent was gone; started a new one (pid %s)", self.run_id, agent.pid)
            self.agent = agent
            self.agent_exit = None
            self.revival_claim = claim
            return False
        code = self.agent_exit if claim == self.revival_claim else None
        if code is not None and self.backend.start_failed(code):
            evidence = f"its new agent exited with code {code} before it recorded itself"
        elif self.run_dir.claim_age(claim) >= AGENT_START_GRACE:
            evidence = f"its new agent did not record itself within {AGENT_START_GRACE:g}s"
        else:
            return False  # a new agent is starting (here or in another server)
        if not self.run_dir.claim_once("verdict"):
            return False
        self._record_lost(state, folder, evidence)
        return True

    def free_if_damaged(self, folder: StateFolder) -> None:
        """A damaged run whose agent is gone never holds the workspace (contract 6.1).

        Its files stay as found; the lock it holds goes (a cluster run's lock
        is otherwise held while the run outlives its agent), and whatever
        of it still runs is ended: its cluster job is asked to stop. Once,
        by one server."""
        if self.damage is None or self.damaged_but_live or self.state is None or self.state.status.is_final:
            return
        if RunLock(folder).holder() != self.run_id or not self.run_dir.claim_once("verdict"):
            return
        remains = self.backend.end_remains(self.run_dir, self.state)
        log.info("run %s is damaged and its agent is gone: lock released; %s", self.run_id, remains)
        RunLock(folder).release(self.run_id)

    def _record_lost(self, state: RunState, folder: StateFolder, evidence: str) -> None:
        """Record the ``lost`` verdict (in memory when the disk refuses it) and free the lock."""
        self._record_ended(state, folder, RunStatus.LOST, Failure("error", evidence))

    def _record_ended(
        self, state: RunState, folder: StateFolder, status: RunStatus, failure: Failure
    ) -> None:
        """Record a verdict on a run whose agent is gone (in memory when the disk refuses it)
        and free the lock."""
        remains = self.backend.end_remains(self.run_dir, state)
        if remains:
            failure = Failure(failure.kind, f"{failure.evidence}; {remains}")
        state.status = status
        state.failure = failure
        state.ended_at = state.ended_at or time.time()
        try:
            self.run_dir.write_state(state)
            self.state_signature = self.run_dir.state_signature()
        except OSError as error:  # a full disk: the verdict stays in memory, the lock goes anyway
            log.warning("run %s: could not record that it was %s: %s", self.run_id, status.value, error)
        RunLock(folder).release(self.run_id)

    def check_disk(self) -> None:
        """While the run is live: is its filesystem full? (``failure.kind`` ``disk-full`` meanwhile.)"""
        if self.is_final:
            self.disk_full = None
            return
        try:
            free = shutil.disk_usage(self.run_dir.path).free
        except OSError:
            return
        if free >= DISK_FULL_BYTES:
            self.disk_full = None
        elif self.disk_full is None:
            self.disk_full = (
                f"the filesystem of {self.run_dir.path} has {free} bytes free: the run's writes fail "
                "(No space left on device); the trainer keeps running"
            )


def _name_file(error: str, run_dir: RunDir) -> str:
    """Evidence that names the file relative to the run folder (``state.json: ...``)."""
    prefix = f"{run_dir.path}{os.sep}"
    return error[len(prefix) :] if error.startswith(prefix) else error
