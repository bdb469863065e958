"""The attempt loop: one run's launches, crashes, relaunch decisions and end, for every back end.

Both agents (``agent/local/agent.py``, a trainer on this machine, and
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
(``agent_records``), moved and said here in one wording.

Nothing here reads a file, a clock or a process by itself: the tests drive
the loop with a fake ``Trainer`` (``tests/unit/test_attempt_loop.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import attrs

from arena_ls.agent.ckptverify import Verification, candidates
from arena_ls.agent.failure import RESUME_UNKNOWN, last_line
from arena_ls.agent.relaunch import CrashFacts, Stop, decide, needs_saved_file, needs_verification
from arena_ls.agent.rollback import Rollback
from arena_ls.agent.watchdog import GiveUp, GiveUpReason, Relaunch, Watchdog
from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import (
    MAX_RELAUNCH_RECORDS,
    CheckpointRecord,
    Failure,
    RelaunchRecord,
    RunSpec,
    RunState,
)
from arena_ls.run.states import RunStatus, transition

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
        tell: Callable[[AgentRecord], None],
        save: Callable[[], None],
    ) -> None:
        self.spec = spec
        self.state = state
        self.lock = lock
        self.tell = tell
        """Writes one record on the run's ``arena`` stream."""
        self.save = save
        """Asks for ``state.json`` to be written (never on the calling thread)."""
        self.abandoned: tuple[int, float] | None = None
        """After a rollback, (the step it went back to, when): checkpoints past that step announced
        before then are the stretch the rollback abandoned, never resumed from again."""
        self.announced: list[CheckpointRecord] = []
        """The checkpoints this run announced (every attempt), oldest first, the last
        ``spec.checkpoint_history`` kept: with the job's history, what a resume may fall back to."""

    def add_checkpoint(self, record: CheckpointRecord) -> None:
        """An announced checkpoint: the run's last, and one a later resume may fall back to."""
        with self.lock:
            self.state.last_checkpoint = record
            self.announced.append(record)
            del self.announced[: -max(1, self.spec.checkpoint_history)]

    def resume_candidates(self, at_most: int | None = None) -> list[CheckpointRecord]:
        """What a resume may take, newest first (``ckptverify.candidates``)."""
        spec = self.spec
        history = list(spec.job_history)
        if spec.job_checkpoint is not None:
            history.append(spec.job_checkpoint)
        with self.lock:
            announced = list(self.announced)
            abandoned = self.abandoned
        ordered = candidates(history, announced, at_most=at_most)
        if abandoned is None:
            return ordered
        back_to, at = abandoned
        return [r for r in ordered if r.step <= back_to or r.at > at]

    def resumed(self, verification: Verification) -> None:
        """A resume takes ``verification.chosen``: ``resumedFrom``, the run's checkpoint, its line."""
        with self.lock:
            self.state.resumed_from = verification.resumed_from()
            if verification.chosen is not None:
                self.state.last_checkpoint = verification.chosen
        self.say(verification.describe())
        self.save()

    def say(self, text: str) -> None:
        """A note of the supervisor's own (a line no reader acts on)."""
        self.tell(agent_records.note(text))

    def warn(self, text: str) -> None:
        """A warning the person sees as one (``warning: ...``)."""
        self.tell(agent_records.warning(text))

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
        self.tell(agent_records.crashed(self.spec.job_id, code, signal))
        if failure is not None:
            self.tell(agent_records.failure(failure.kind, failure.evidence))

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
        """The run's final status, through the moves an agent that polls may have missed."""
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
            self.tell(agent_records.finished(self.spec.job_id))
        self.tell(agent_records.ended(status.value))


class Trainer(Protocol):
    """One back end's way of running attempts (a local process tree; a Ray submission)."""

    @property
    def launched_from(self) -> int | None:
        """The step the current attempt was launched from (None: from scratch)."""

    @property
    def announced(self) -> bool:
        """The current attempt announced progress or a checkpoint."""

    def launch(self, step: int | None, path: str | None = None, skip: int = 0) -> Outcome:
        """Launch one attempt from ``step`` (the checkpoint at ``path``, for ``{path}``; ``skip``
        batches for ``{skip}``), follow it to its end and judge it."""

    def rollback_wanted(self) -> Rollback | None:
        """After an attempt judged ``RESTARTING``: the loss-spike rollback it stopped for, if any."""

    def tail(self) -> list[str]:
        """The trainer's last lines (the evidence of a refusal to resume)."""

    def saved_file(self) -> str | None:
        """A file the job's trainer saved that exists (looked for only when no checkpoint is known)."""

    def verify(self, ordered: list[CheckpointRecord]) -> Verification | None:
        """The newest of ``ordered`` that passes verification (contract 8.2; ``ckptverify``), or
        None where this back end cannot look at the trainer's files (a cluster's)."""

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
    _verification: Verification | None = None
    """The last crash's verification (``crash_facts``), carried out once the policy decided."""

    def run(self, first: Callable[[], Outcome] | None = None) -> RunStatus:
        """The run's final status (recorded, and said, by ``finish``).

        ``first`` replaces the first launch (a new cluster agent goes on following, or waiting).
        """
        outcome = first() if first is not None else self._launch_resuming(self.record.spec.resumed_from_step)
        while True:
            if outcome is RunStatus.RESTARTING and (rollback := self.trainer.rollback_wanted()) is not None:
                outcome = self._roll_back(rollback)
                continue
            if outcome is RunStatus.RESTARTING:
                resumed, step = self.trainer.resume_paused()
                if not resumed:
                    return self._end(RunStatus.STOPPED)
                outcome = self._launch_resuming(step)
                continue
            if outcome is not None:
                return self._end(outcome)
            relaunch = self._after_crash()
            if isinstance(relaunch, RunStatus):
                return self._end(relaunch)
            outcome = self.trainer.launch(relaunch.start_step, self._resume_path(relaunch.start_step))

    def _launch_resuming(self, step: int | None) -> Outcome:
        """Launch from ``step`` (a start that resumes, a resume after a battery stop) once the
        checkpoint there is verified, or the newest earlier one that passes (contract 8.2).

        ``step`` with no recorded checkpoint at it (a step a person named and confirmed) is
        launched as asked; recorded ones of which none passes end the run ``crashed``
        (``resume-unknown``) before any trainer starts: nothing is resumed from garbage."""
        if step is None or not self.record.spec.resume_args:
            return self.trainer.launch(step)
        ordered = self.record.resume_candidates(at_most=step)
        if not any(record.step == step for record in ordered):
            return self.trainer.launch(step)
        verification = self.trainer.verify(ordered)
        if verification is None:
            return self.trainer.launch(step, self._resume_path(step))
        if verification.interrupted:
            return self._stopped_while_verifying()
        if verification.chosen is None:
            return self._unverified(verification)
        self.record.resumed(verification)
        return self.trainer.launch(verification.chosen.step, verification.chosen.path)

    def _roll_back(self, rollback: Rollback) -> Outcome:
        """A loss-spike rollback (contract 8.2): said, counted, and launched from its verified
        checkpoint with ``{skip}`` batches skipped."""
        record = self.record
        target = rollback.target
        with record.lock:
            record.state.rollbacks = rollback.number
            record.abandoned = (target.step, time.time())
            record.move(RunStatus.RESTARTING)
        record.tell(agent_records.rollback(rollback.spike_step, target.step, rollback.skip, rollback.number,
                                    rollback.budget))  # fmt: skip
        if not any("{skip}" in arg for arg in record.spec.resume_args):
            record.warn("resume.args has no {skip}: the rollback resumes without skipping batches")
        record.resumed(rollback.verification)
        return self.trainer.launch(target.step, target.path, rollback.skip)

    def _stopped_while_verifying(self) -> RunStatus:
        """A stop request arrived while the checkpoint was verified: nothing resumes, nothing failed."""
        self.record.say("stop requested while the checkpoint was verified: not resuming")
        return RunStatus.STOPPED

    def _unverified(self, verification: Verification) -> RunStatus:
        """No checkpoint passed: no resume, ``crashed`` with ``resume-unknown`` naming what failed."""
        failure = Failure(RESUME_UNKNOWN, verification.evidence())
        self.record.say(verification.describe())
        with self.record.lock:
            self.record.state.failure = failure
            self.record.state.resumed_from = None
        self.record.tell(agent_records.failure(failure.kind, failure.evidence, final=True))
        return RunStatus.CRASHED

    def _resume_path(self, step: int | None) -> str | None:
        """The path of the run's checkpoint at ``step`` (for ``{path}``), when one is recorded."""
        with self.record.lock:
            last = self.record.state.last_checkpoint
        return last.path if last is not None and last.step == step and last.path else None

    def _end(self, status: RunStatus) -> RunStatus:
        self.record.finish(status)
        return status

    def _after_crash(self) -> Relaunch | RunStatus:
        """The relaunch policy's decision, carried out: a relaunch after its backoff, or the final status."""
        watchdog = self.trainer.watchdog()
        facts = self.crash_facts()
        self._verification = facts.verification
        if facts.verification is not None and facts.verification.interrupted:
            return self._stopped_while_verifying()
        decision = decide(facts, watchdog)
        self.trainer.decided(watchdog)
        if isinstance(decision, Stop):
            return self._stop_relaunching(decision)
        if isinstance(decision, GiveUp):
            return self._give_up(decision)
        facts_verification = self._verification
        if facts_verification is not None and facts_verification.chosen is not None:
            self.record.resumed(facts_verification)
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
        if needs_verification(facts, trainer.watchdog()):
            ordered = record.resume_candidates()
            verification = trainer.verify(ordered) if ordered else None
            return attrs.evolve(facts, verification=verification)
        if not needs_saved_file(facts):
            return facts
        return attrs.evolve(facts, saved_file=trainer.saved_file())

    def _stop_relaunching(self, decision: Stop) -> RunStatus:
        """The policy stops the run (``resume-refused``, ``resume-unknown``): ``crashed``."""
        if self._verification is not None and self._verification.chosen is None:
            self.record.say(self._verification.describe())
        with self.record.lock:
            self.record.state.failure = decision.failure
        self.record.tell(agent_records.failure(decision.failure.kind, decision.failure.evidence, final=True))
        return RunStatus.CRASHED

    def _give_up(self, decision: GiveUp) -> RunStatus:
        """The watchdog relaunches no more: ``crashed`` (a crash loop says so)."""
        if decision.reason is GiveUpReason.CRASH_LOOP:
            with self.record.lock:
                failure = decision.crash_loop_failure(self.record.state.failure)
                self.record.state.failure = failure
            self.record.tell(agent_records.gave_up(failure.evidence))
        return RunStatus.CRASHED
