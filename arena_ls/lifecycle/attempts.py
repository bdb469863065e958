"""The attempt loop: one run's launches, crashes, relaunch decisions and end, for every back end.

Both agents (``lifecycle/agent.py``, a trainer on this machine, and
``cluster/agent.py``, a submission to Ray) run a run the same way, and this
module is that way, written once::

    launch ──► follow ──► judge ─┬─ final status (succeeded, stopped, ...) ──────────► finish
      ▲                          ├─ paused for battery ── resume_paused ──► launch
      │                          └─ crashed ── CrashFacts ── relaunch.decide ─┬─ Stop ────► finish (crashed)
      │                                                                      ├─ GiveUp ──► finish (crashed)
      └──────────── sit_out (backoff; a stop cancels: stopped) ◄── Relaunch ─┘

What differs between the back ends is behind ``Trainer``: how one attempt is
launched, followed and judged (a process tree and its exit status; a Ray
submission and its job status), how a backoff is waited out, and where a
saved file may be found. What is the same is ``RunRecord``'s: the run's
state and its ``arena`` lines, which are typed records
(``supervisor_events``), moved and said here in one wording.

Nothing here reads a file, a clock or a process by itself: the tests drive
the loop with a fake ``Trainer`` (``tests/unit/test_attempt_loop.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import attrs

from arena_ls.lifecycle import supervisor_events as events
from arena_ls.lifecycle.failure import last_line
from arena_ls.lifecycle.relaunch import CrashFacts, Stop, decide, needs_saved_file
from arena_ls.lifecycle.rundir import MAX_RELAUNCH_RECORDS, Failure, RelaunchRecord, RunSpec, RunState
from arena_ls.lifecycle.states import RunStatus, transition
from arena_ls.lifecycle.supervisor_events import SupervisorEvent
from arena_ls.lifecycle.watchdog import GiveUp, GiveUpReason, Relaunch, Watchdog

Outcome = RunStatus | None
"""What one attempt ended in: a final status; ``RESTARTING``: paused for battery (it may resume);
None: it crashed, and the relaunch policy decides."""


class RunRecord:
    """The run's state and its ``arena`` lines, as both agents change them (under ``lock``)."""

    def __init__(
        self,
        spec: RunSpec,
        state: RunState,
        lock: threading.RLock,
        tell: Callable[[SupervisorEvent], None],
        save: Callable[[], None],
    ) -> None:
        self.spec = spec
        self.state = state
        self.lock = lock
        self.tell = tell
        """Writes one record on the run's ``arena`` stream."""
        self.save = save
        """Asks for ``state.json`` to be written (never on the calling thread)."""

    def say(self, text: str) -> None:
        """A note of the supervisor's own (a line no reader acts on)."""
        self.tell(events.note(text))

    def warn(self, text: str) -> None:
        """A warning the person sees as one (``warning: ...``)."""
        self.tell(events.warning(text))

    def move(self, target: RunStatus) -> None:
        """Change the status (a legal move; the same status is no move) and have it recorded."""
        with self.lock:
            if self.state.status is not target:
                self.state.status = transition(self.spec.run_id, self.state.status, target)
        self.save()

    def checkpoint_step(self) -> int | None:
        with self.lock:
            return self.state.last_checkpoint.step if self.state.last_checkpoint else None

    def crashed(self, failure: Failure | None, code: int | None, signal: str | None) -> None:
        """The attempt failed: its failure class recorded, ``TRAINING_CRASHED`` and ``failure:`` said."""
        with self.lock:
            self.state.failure = failure
        self.tell(events.crashed(self.spec.job_id, code, signal))
        if failure is not None:
            self.tell(events.failure(failure.kind, failure.evidence))

    def relaunched(self, from_step: int | None) -> None:
        """A relaunch is decided (under the lock): its record, with the steps the crash lost."""
        state = self.state
        lost = None if state.step is None else max(0, state.step - (from_step or 0))
        state.relaunches.append(RelaunchRecord(time.time(), state.ended_at, from_step, lost))
        del state.relaunches[:-MAX_RELAUNCH_RECORDS]

    def progressed(self, at: float) -> None:
        """A progress announcement (under the lock): the first after a relaunch ends its downtime."""
        relaunches = self.state.relaunches
        if relaunches and relaunches[-1].downtime_seconds is None:
            last = relaunches[-1]
            last.downtime_seconds = round(max(0.0, at - (last.crashed_at or last.at)), 3)

    def finish(self, status: RunStatus) -> None:
        """The run's final status, through the moves a follower that polls may have missed."""
        with self.lock:
            self.state.ended_at = self.state.ended_at or time.time()
            self.state.next_launch_at = None
            self.state.stalled = False
            if status is RunStatus.STOPPED and self.state.status is RunStatus.RUNNING:
                self.move(RunStatus.STOPPING)
            if status is RunStatus.SUCCEEDED and self.state.status in (
                RunStatus.STARTING,
                RunStatus.RESTARTING,
            ):
                self.move(RunStatus.RUNNING)  # it ran between two polls (a cluster's)
            self.move(status)
        if status is RunStatus.SUCCEEDED:
            self.tell(events.finished(self.spec.job_id))
        self.tell(events.ended(status.value))


class Trainer(Protocol):
    """One back end's way of running attempts (a local process tree; a Ray submission)."""

    @property
    def launched_from(self) -> int | None:
        """The step the current attempt was launched from (None: from scratch)."""

    @property
    def announced(self) -> bool:
        """The current attempt announced progress or a checkpoint."""

    def launch(self, step: int | None) -> Outcome:
        """Launch one attempt from ``step``, follow it to its end and judge it."""

    def tail(self) -> list[str]:
        """The trainer's last lines (the evidence of a refusal to resume)."""

    def saved_file(self) -> str | None:
        """A file the job's trainer saved that exists (looked for only when no checkpoint is known)."""

    def watchdog(self) -> Watchdog:
        """The run's watchdog, where its relaunches so far left it."""

    def decided(self, watchdog: Watchdog) -> None:
        """The relaunch policy decided (the watchdog's position may be recorded)."""

    def relaunching(self, relaunch: Relaunch) -> None:
        """A relaunch is decided; called before the run moves to ``restarting``."""

    def sit_out(self, relaunch: Relaunch) -> bool:
        """Wait out the backoff (and any relaunch gate); False when a stop cancelled the relaunch."""

    def resume_paused(self) -> tuple[bool, int | None]:
        """After a stop for battery: (resumed, from step) once power is back; (False, None): stay stopped."""


@attrs.define
class AttemptLoop:
    """Runs attempts of ``trainer`` until the run has a final status (see the module docstring)."""

    record: RunRecord
    trainer: Trainer

    def run(self, first: Callable[[], Outcome] | None = None) -> RunStatus:
        """The run's final status (recorded, and said, by ``finish``).

        ``first`` replaces the first launch (a new cluster follower goes on following, or waiting).
        """
        outcome = first() if first is not None else self.trainer.launch(self.record.spec.resumed_from_step)
        while True:
            if outcome is RunStatus.RESTARTING:
                resumed, step = self.trainer.resume_paused()
                if not resumed:
                    return self._end(RunStatus.STOPPED)
                outcome = self.trainer.launch(step)
                continue
            if outcome is not None:
                return self._end(outcome)
            relaunch = self._after_crash()
            if isinstance(relaunch, RunStatus):
                return self._end(relaunch)
            outcome = self.trainer.launch(relaunch.start_step)

    def _end(self, status: RunStatus) -> RunStatus:
        self.record.finish(status)
        return status

    def _after_crash(self) -> Relaunch | RunStatus:
        """The relaunch policy's decision, carried out: a relaunch after its backoff, or the final status."""
        watchdog = self.trainer.watchdog()
        decision = decide(self.crash_facts(), watchdog)
        self.trainer.decided(watchdog)
        if isinstance(decision, Stop):
            return self._stop_relaunching(decision)
        if isinstance(decision, GiveUp):
            return self._give_up(decision)
        self.trainer.relaunching(decision)
        record = self.record
        with record.lock:
            record.state.restarts = decision.restart
            record.state.next_launch_at = time.time() + decision.delay
            record.relaunched(decision.start_step)
            record.move(RunStatus.RESTARTING)
        record.tell(decision.event())
        return decision if self.trainer.sit_out(decision) else RunStatus.STOPPED

    def crash_facts(self) -> CrashFacts:
        """The facts of the crash the relaunch policy decides on (``relaunch.decide``)."""
        record, trainer = self.record, self.trainer
        job = record.spec.job_checkpoint
        with record.lock:
            signal_name = record.state.signal
            stalled = record.state.failure is not None and record.state.failure.kind == "stalled"
        facts = CrashFacts(
            job_checkpoint=job.step if job is not None else None,
            run_checkpoint=record.checkpoint_step(),
            run_start=record.spec.resumed_from_step,
            launched_with_resume=trainer.launched_from is not None and bool(record.spec.resume_args),
            announced=trainer.announced,
            by_signal=signal_name is not None,
            last_line=last_line(trainer.tail()),
            stalled=stalled,
        )
        if not needs_saved_file(facts):
            return facts
        return attrs.evolve(facts, saved_file=trainer.saved_file())

    def _stop_relaunching(self, decision: Stop) -> RunStatus:
        """The policy stops the run (``resume-refused``, ``resume-unknown``): ``crashed``."""
        with self.record.lock:
            self.record.state.failure = decision.failure
        self.record.tell(events.failure(decision.failure.kind, decision.failure.evidence, final=True))
        return RunStatus.CRASHED

    def _give_up(self, decision: GiveUp) -> RunStatus:
        """The watchdog relaunches no more: ``crashed`` (a crash loop says so)."""
        if decision.reason is GiveUpReason.CRASH_LOOP:
            with self.record.lock:
                failure = decision.crash_loop_failure(self.record.state.failure)
                self.record.state.failure = failure
            self.record.tell(events.gave_up(failure.evidence))
        return RunStatus.CRASHED
