"""The attempt loop (``agent/attempts.py``) driven by a fake ``Trainer``: no process, file or clock.

The fake plays both agent flavours: ``local`` keeps one watchdog for the run (as
``agent/local/agent.py`` does); ``cluster`` rebuilds it before every decision from the
position recorded after the last one (as ``cluster/agent.py`` does, so that a new
agent goes on with the same budget). Every case must come out the same for both.
"""

from __future__ import annotations

import threading
import time

import attrs
import pytest

from arena_ls.agent.attempts import AttemptLoop, Outcome, RunRecord
from arena_ls.agent.watchdog import Relaunch, Watchdog, WatchdogRules
from arena_ls.run.agent_records import AgentRecord, Kind
from arena_ls.run.rundir import CheckpointRecord, Failure, RunSpec, RunState
from arena_ls.run.states import RunStatus

FLAVOURS = ["local", "cluster"]


@attrs.define
class Attempt:
    """What one scripted attempt does: announce, save, then end with ``outcome``."""

    outcome: Outcome = None
    checkpoint: int | None = None
    announced: bool = True
    signal: str | None = None
    tail: list[str] = attrs.field(factory=list)


@attrs.define
class FakeTrainer:
    """A ``Trainer`` whose attempts follow a script; it records what the loop asked of it."""

    record: RunRecord
    script: list[Attempt]
    flavour: str
    saved: str | None = None
    stop_in_backoff: bool = False
    launches: list[int | None] = attrs.field(factory=list)
    backoffs: list[float] = attrs.field(factory=list)
    current: Attempt | None = None
    held: Watchdog | None = None
    position: dict[str, object] = attrs.field(factory=dict)

    @property
    def launched_from(self) -> int | None:
        return self.launches[-1] if self.launches else None

    @property
    def announced(self) -> bool:
        return self.current is not None and self.current.announced

    def launch(self, step: int | None, path: str | None = None, skip: int = 0) -> Outcome:
        self.launches.append(step)
        self.current = attempt = self.script.pop(0)
        state = self.record.state
        self.record.move(RunStatus.RUNNING)
        if attempt.checkpoint is not None:
            state.last_checkpoint = CheckpointRecord(
                step=attempt.checkpoint, path="ckpt.pt", at=0.0, run_id="r"
            )
        state.signal = attempt.signal
        if attempt.outcome is None:
            self.record.crashed(Failure("error", "exit code 1"), 1, attempt.signal)
        return attempt.outcome

    def tail(self) -> list[str]:
        return self.current.tail if self.current else []

    def saved_file(self) -> str | None:
        return self.saved

    def verify(self, ordered: list[CheckpointRecord]) -> None:
        return None  # as a cluster's: the files are not looked at

    def rollback_wanted(self) -> None:
        return None

    def watchdog(self) -> Watchdog:
        spec = self.record.spec
        rules = WatchdogRules.for_job(
            kind=spec.kind,
            resume_args=spec.resume_args,
            max_restarts=spec.max_restarts,
            backoff_seconds=spec.backoff_seconds,
        )
        if self.flavour == "local":
            self.held = self.held or Watchdog(rules)
            return self.held
        return Watchdog.resumed(
            rules,
            budget_left=self.position.get("budget_left"),  # type: ignore[arg-type]
            restarts=self.record.state.restarts,
            relaunched_from=self.position.get("relaunch_step"),  # type: ignore[arg-type]
            relaunched=bool(self.position.get("relaunched")),
        )

    def decided(self, watchdog: Watchdog) -> None:
        self.position["budget_left"] = watchdog.budget_left

    def relaunching(self, relaunch: Relaunch) -> None:
        self.position["relaunch_step"] = relaunch.start_step
        self.position["relaunched"] = True

    def sit_out(self, relaunch: Relaunch) -> bool:
        self.backoffs.append(relaunch.delay)
        return not self.stop_in_backoff

    def resume_paused(self) -> tuple[bool, int | None]:
        step = self.record.checkpoint_step()
        return (step is not None, step)


@attrs.define
class Run:
    trainer: FakeTrainer
    said: list[AgentRecord]
    state: RunState

    def kinds(self) -> list[Kind]:
        return [event.kind for event in self.said]

    def words(self) -> list[str]:
        return [event.render() for event in self.said]


def run_loop(
    flavour: str,
    script: list[Attempt],
    *,
    resume: bool = True,
    max_restarts: int = 3,
    start: int | None = None,
    job_checkpoint: int | None = None,
    saved: str | None = None,
    stop_in_backoff: bool = False,
) -> tuple[RunStatus, Run]:
    spec = RunSpec(
        run_id="r",
        job_id="tiny-lm",
        job_name="tiny-lm",
        kind="train",
        argv=["py", "train.py"],
        cwd=".",
        resume_args=["--resume", "{step}"] if resume else [],
        max_restarts=max_restarts,
        backoff_seconds=2.0,
        resumed_from_step=start,
        job_checkpoint=(
            CheckpointRecord(step=job_checkpoint, path="ckpt.pt", at=0.0, run_id="old")
            if job_checkpoint is not None
            else None
        ),
    )
    state = RunState(run_id="r", job_id="tiny-lm")
    said: list[AgentRecord] = []
    record = RunRecord(spec, state, threading.RLock(), said.append, lambda: None)
    trainer = FakeTrainer(record, list(script), flavour, saved=saved, stop_in_backoff=stop_in_backoff)
    status = AttemptLoop(record, trainer).run()
    assert status is state.status, "the loop's answer is the recorded final status"
    assert trainer.script == [], "every scripted attempt was launched"
    return status, Run(trainer, said, state)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_run_that_finishes_is_succeeded_and_says_so(flavour: str) -> None:
    status, run = run_loop(flavour, [Attempt(RunStatus.SUCCEEDED)])
    assert status is RunStatus.SUCCEEDED
    assert run.words() == ["tiny-lm finished", "run ended: succeeded"]
    assert run.state.ended_at is not None and run.state.next_launch_at is None


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_crash_is_relaunched_from_the_last_checkpoint(flavour: str) -> None:
    status, run = run_loop(flavour, [Attempt(None, checkpoint=300), Attempt(RunStatus.SUCCEEDED)])
    assert status is RunStatus.SUCCEEDED
    assert run.trainer.launches == [None, 300]
    assert run.state.restarts == 1 and run.trainer.backoffs == [2.0]
    restarting = [e for e in run.said if e.kind is Kind.RESTARTING]
    assert [e.render() for e in restarting] == ["restarting from step 300 (attempt 1/3) in 2s"]
    assert restarting[0].step == 300


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_relaunch_never_starts_from_zero_while_the_job_has_a_checkpoint(flavour: str) -> None:
    """The stop-only announce: the run itself announced nothing, the job's last checkpoint is 600."""
    script = [Attempt(None, announced=True), Attempt(RunStatus.SUCCEEDED)]
    status, run = run_loop(flavour, script, start=600, job_checkpoint=600)
    assert status is RunStatus.SUCCEEDED
    assert run.trainer.launches == [600, 600]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_trainer_that_refuses_to_resume_is_not_relaunched(flavour: str) -> None:
    refusal = Attempt(
        None, announced=False, tail=["loading ckpt.pt", "error: checkpoint is at step 600, not 50"]
    )
    status, run = run_loop(flavour, [refusal], start=50)
    assert status is RunStatus.CRASHED
    assert run.state.failure is not None and run.state.failure.kind == "resume-refused"
    assert "checkpoint is at step 600, not 50" in run.state.failure.evidence
    assert run.trainer.launches == [50] and run.trainer.backoffs == []
    assert run.words()[-2].startswith("failure: resume-refused: ") and run.words()[-2].endswith(
        "; not relaunching"
    )
    assert run.words()[-1] == "run ended: crashed"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_saved_file_nobody_can_place_stops_the_run(flavour: str) -> None:
    status, run = run_loop(flavour, [Attempt(None, announced=False)], saved="ckpt.pt")
    assert status is RunStatus.CRASHED
    assert run.state.failure is not None and run.state.failure.kind == "resume-unknown"
    assert "ckpt.pt" in run.state.failure.evidence
    assert run.trainer.launches == [None], "never relaunched from scratch over the saved file"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_crash_loop_gives_up_naming_the_last_failure(flavour: str) -> None:
    script = [Attempt(None, checkpoint=300), Attempt(None, checkpoint=300)]
    status, run = run_loop(flavour, script)
    assert status is RunStatus.CRASHED
    assert run.trainer.launches == [None, 300]
    assert run.state.failure is not None and run.state.failure.kind == "crash-loop"
    assert "step 300" in run.state.failure.evidence and "last failure: error" in run.state.failure.evidence
    assert Kind.GAVE_UP in run.kinds()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_checkpoint_progress_restores_the_budget_until_a_crash_loop(flavour: str) -> None:
    script = [Attempt(None, checkpoint=100), Attempt(None, checkpoint=200), Attempt(None, checkpoint=300)]
    script.append(Attempt(None, checkpoint=300))
    status, run = run_loop(flavour, script, max_restarts=1)
    assert status is RunStatus.CRASHED
    assert run.trainer.launches == [None, 100, 200, 300], "progress since each relaunch restores the budget"
    assert run.trainer.backoffs == [2.0, 4.0, 8.0], "the backoff doubles with every relaunch of the run"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_job_that_cannot_resume_crashes_for_good(flavour: str) -> None:
    status, run = run_loop(flavour, [Attempt(None, checkpoint=300)], resume=False)
    assert status is RunStatus.CRASHED
    assert run.trainer.launches == [None] and Kind.RESTARTING not in run.kinds()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_stop_during_the_backoff_cancels_the_relaunch(flavour: str) -> None:
    status, run = run_loop(flavour, [Attempt(None, checkpoint=300)], stop_in_backoff=True)
    assert status is RunStatus.STOPPED
    assert run.trainer.launches == [None]
    assert run.words()[-1] == "run ended: stopped"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_stop_in_the_grace_window_ends_the_run_stopped_without_a_relaunch(flavour: str) -> None:
    """The trainer honoured the stop (the attempt judged ``stopped``): nothing is relaunched."""
    status, run = run_loop(flavour, [Attempt(RunStatus.STOPPED, checkpoint=300, signal="SIGTERM")])
    assert status is RunStatus.STOPPED
    assert run.trainer.launches == [None] and run.trainer.backoffs == []


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_battery_pause_resumes_from_the_checkpoint_or_stays_stopped(flavour: str) -> None:
    paused = [Attempt(RunStatus.RESTARTING, checkpoint=300), Attempt(RunStatus.SUCCEEDED)]
    status, run = run_loop(flavour, paused)
    assert status is RunStatus.SUCCEEDED and run.trainer.launches == [None, 300]
    status, run = run_loop(flavour, [Attempt(RunStatus.RESTARTING)])
    assert status is RunStatus.STOPPED and run.trainer.launches == [None]


def test_finish_fills_in_the_moves_a_poll_may_have_missed() -> None:
    """A cluster job that ran and ended between two polls: starting -> running -> succeeded."""
    spec = RunSpec(run_id="r", job_id="j", job_name="j", kind="task", argv=["x"], cwd=".")
    state = RunState(run_id="r", job_id="j")
    moves: list[RunStatus] = []
    record = RunRecord(spec, state, threading.RLock(), lambda _: None, lambda: moves.append(state.status))
    record.finish(RunStatus.SUCCEEDED)
    assert moves == [RunStatus.RUNNING, RunStatus.SUCCEEDED]
    assert state.ended_at is not None and state.ended_at <= time.time()
