"""The attempt loop verifies before every resume (contract 8.2): a start that resumes, a relaunch.

Driven with the fake ``Trainer`` of ``test_attempt_loop``, whose ``verify`` here reads a scripted
disk: which checkpoint files are whole. No process, no file, no clock."""

from __future__ import annotations

import threading

import attrs

from arena_ls.agent.attempts import AttemptLoop, RunRecord
from arena_ls.agent.ckptverify import Reading, Verification, verify
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import CheckpointRecord, RunSpec, RunState
from arena_ls.run.states import RunStatus
from tests.unit.test_attempt_loop import Attempt, FakeTrainer


@attrs.define
class LookingTrainer(FakeTrainer):
    """A fake trainer whose checkpoints are files: ``whole`` steps pass, the others are torn."""

    whole: set[int] = attrs.field(factory=set)
    stop_during_look: bool = False
    verified: list[list[int]] = attrs.field(factory=list)
    paths: list[str | None] = attrs.field(factory=list)

    def launch(self, step: int | None, path: str | None = None, skip: int = 0) -> RunStatus | None:
        self.paths.append(path)
        outcome = super().launch(step, path, skip)
        current = self.current
        if current is not None and current.checkpoint is not None:
            self.record.add_checkpoint(
                CheckpointRecord(current.checkpoint, f"ckpt-{current.checkpoint}.pt", 1.0, bytes=1)
            )
        return outcome

    def verify(self, ordered: list[CheckpointRecord]) -> Verification:  # type: ignore[override]
        self.verified.append([r.step for r in ordered])
        if self.stop_during_look:
            return verify(ordered, lambda r: Reading(exists=True, stopped=True))
        return verify(
            ordered, lambda r: Reading(exists=True, size=1 if r.step in self.whole else 0, mtime_ns=1)
        )


def history(*steps: int) -> list[CheckpointRecord]:
    return [CheckpointRecord(s, f"ckpt-{s}.pt", float(s), bytes=1) for s in steps]


def loop(script: list[Attempt], whole: set[int], *, start: int | None, job: list[CheckpointRecord],
         stop_during_look: bool = False) -> tuple[
    RunStatus, LookingTrainer, RunState, list[str]
]:  # fmt: skip
    spec = RunSpec(
        run_id="r", job_id="lm", job_name="lm", kind="train", argv=["py", "t.py"], cwd=".",
        resume_args=["--resume", "{path}"], max_restarts=3, backoff_seconds=0.0, resumed_from_step=start,
        job_checkpoint=job[-1] if job else None, job_history=job,
    )  # fmt: skip
    state = RunState(run_id="r", job_id="lm")
    said: list[AgentRecord] = []
    record = RunRecord(spec, state, threading.RLock(), said.append, lambda: None)
    trainer = LookingTrainer(record, list(script), "local", whole=whole, stop_during_look=stop_during_look)
    status = AttemptLoop(record, trainer).run()
    return status, trainer, state, [e.render() for e in said]


def test_a_start_that_resumes_falls_back_to_the_newest_whole_checkpoint() -> None:
    status, trainer, state, words = loop([Attempt(RunStatus.SUCCEEDED)], {20}, start=40, job=history(20, 40))
    assert status is RunStatus.SUCCEEDED
    assert trainer.launches == [20] and trainer.paths == ["ckpt-20.pt"], "{path} is the verified file"
    assert state.resumed_from is not None and state.resumed_from.step == 20
    assert state.resumed_from.verified == "bytes"
    assert [(s.step, s.why) for s in state.resumed_from.skipped] == [
        (40, "is 0 bytes, 1 announced: torn or replaced")
    ]
    assert any(
        w.startswith("resuming from step 20 (ckpt-20.pt), verified by bytes; skipped step 40") for w in words
    )


def test_a_start_whose_checkpoints_all_fail_starts_no_trainer_and_ends_resume_unknown() -> None:
    status, trainer, state, words = loop([], set(), start=40, job=history(20, 40))
    assert status is RunStatus.CRASHED and trainer.launches == [], "no trainer ran over a torn file"
    assert state.failure is not None and state.failure.kind == "resume-unknown"
    assert "step 40" in state.failure.evidence and "step 20" in state.failure.evidence
    assert state.resumed_from is None
    assert words[-1] == "run ended: crashed"


def test_a_start_at_a_step_a_person_named_with_no_record_is_launched_as_asked() -> None:
    status, trainer, state, _ = loop([Attempt(RunStatus.SUCCEEDED)], set(), start=55, job=history(20, 40))
    assert status is RunStatus.SUCCEEDED and trainer.launches == [55] and trainer.verified == []
    assert state.resumed_from is None


def test_a_relaunch_skips_the_torn_newest_checkpoint_of_the_run() -> None:
    script = [Attempt(None, checkpoint=60), Attempt(RunStatus.SUCCEEDED)]
    status, trainer, state, words = loop(script, {40}, start=40, job=history(40))
    assert status is RunStatus.SUCCEEDED
    assert trainer.verified == [[40], [60, 40]], "the run's own announcement joins the job's history"
    assert trainer.launches == [40, 40] and trainer.paths == ["ckpt-40.pt", "ckpt-40.pt"]
    assert state.resumed_from is not None and [s.step for s in state.resumed_from.skipped] == [60]
    assert state.last_checkpoint is not None and state.last_checkpoint.step == 40, (
        "the run's whole checkpoint"
    )
    assert "restarting from step 40 (attempt 1/3) in 0s" in words


def test_a_relaunch_with_nothing_whole_is_not_relaunched() -> None:
    status, trainer, state, _ = loop([Attempt(None, checkpoint=60)], set(), start=None, job=[])
    assert status is RunStatus.CRASHED and trainer.launches == [None]
    assert state.failure is not None and state.failure.kind == "resume-unknown"
    assert "step 60 (ckpt-60.pt)" in state.failure.evidence


def test_a_stop_during_the_look_stops_the_run_without_a_failure_or_a_launch() -> None:
    status, trainer, state, words = loop([], {20, 40}, start=40, job=history(20, 40), stop_during_look=True)
    assert status is RunStatus.STOPPED and trainer.launches == []
    assert state.failure is None and "stop requested while the checkpoint was verified: not resuming" in words
