"""The loss-spike rollback policy (``agent/rollback.py``, contract 8.2), branch by branch: pure."""

from __future__ import annotations

from arena_ls.agent.ckptverify import Reading, candidates, verify
from arena_ls.agent.rollback import (
    NoRollback,
    Rollback,
    SpikeWatch,
    bound,
    decide,
    spike_over,
    wants_look,
)
from arena_ls.agent.trainer_start import trainer_argv
from arena_ls.run import agent_records
from arena_ls.run.rundir import CheckpointRecord, RollbackSpec

ROLLBACK = RollbackSpec(action="rollback", steps_before=100, skip_batches=200, max_rollbacks=3)


def rec(step: int) -> CheckpointRecord:
    return CheckpointRecord(step, f"ckpt-{step}.pt", float(step), bytes=1)


def whole(record: CheckpointRecord) -> Reading:
    return Reading(exists=True, size=1, mtime_ns=1)


def test_warn_never_rolls_back_nor_looks() -> None:
    warn = RollbackSpec(action="warn")
    assert not wants_look(warn, 0)
    decision = decide(warn, 500, 0, None)
    assert isinstance(decision, NoRollback) and "lossSpikeAction is warn" in decision.why


def test_a_spike_rolls_back_to_the_newest_verified_checkpoint_at_least_steps_before_it() -> None:
    assert bound(ROLLBACK, 500) == 400
    ordered = candidates([rec(100), rec(300), rec(400), rec(450)], [], at_most=bound(ROLLBACK, 500))
    assert [r.step for r in ordered] == [400, 300, 100], "450 is too close to the spike"
    decision = decide(ROLLBACK, 500, 0, verify(ordered, whole))
    assert isinstance(decision, Rollback)
    assert (decision.target.step, decision.skip, decision.number, decision.budget) == (400, 200, 1, 3)


def test_a_torn_candidate_is_skipped_for_an_older_verified_one() -> None:
    ordered = candidates([rec(300), rec(400)], [], at_most=400)
    verification = verify(ordered, lambda r: Reading(exists=r.step != 400, size=1, mtime_ns=1))
    decision = decide(ROLLBACK, 500, 1, verification)
    assert isinstance(decision, Rollback) and decision.target.step == 300 and decision.number == 2


def test_never_a_rollback_without_a_verified_checkpoint_before_the_spike() -> None:
    nothing = decide(ROLLBACK, 150, 0, None)
    assert isinstance(nothing, NoRollback) and "no verified checkpoint at step 50 or before" in nothing.why
    torn = decide(ROLLBACK, 500, 0, verify([rec(400)], lambda r: Reading(exists=False)))
    assert isinstance(torn, NoRollback) and "step 400 (ckpt-400.pt) does not exist" in torn.why


def test_at_most_rollback_max_a_run() -> None:
    assert wants_look(ROLLBACK, 2) and not wants_look(ROLLBACK, 3)
    decision = decide(ROLLBACK, 500, 3, verify([rec(400)], whole))
    assert isinstance(decision, NoRollback) and "3 of insights.rollbackMax 3 done" in decision.why


def test_a_spike_is_the_insights_spike_and_does_not_widen_its_own_window() -> None:
    assert spike_over([1.0, 1.0, 1.0], 5.0, size=20, mads=8, min_jump=0.25) is None, "half a window first"
    steady = [2.0 - 0.01 * i for i in range(20)]
    assert spike_over(steady, 1.9, size=20, mads=8, min_jump=0.25) is None
    assert spike_over(steady, 6.0, size=20, mads=8, min_jump=0.25) is not None
    watch = SpikeWatch(ROLLBACK)
    assert not any(watch.observe(loss) for loss in steady)
    assert watch.observe(6.0) and watch.observe(6.0), "a spike never joins the window"
    assert not watch.observe(float("nan")) and not watch.observe(None)


def test_skip_fills_resume_args_and_the_rollback_line_says_it_all() -> None:
    resume = ["--resume", "--start-step", "{step}", "--skip-batches", "{skip}"]
    argv = trainer_argv(["py", "t.py"], resume, 400, "ckpt-400.pt", 200)
    assert argv[-5:] == ["--resume", "--start-step", "400", "--skip-batches", "200"]
    assert trainer_argv(["py"], ["--skip-batches", "{skip}"], 400)[-1] == "0", "an ordinary resume skips none"
    line = agent_records.rollback(500, 400, 200, 1, 3)
    assert (
        line.render()
        == "rolling back: loss spike at step 500; resuming from step 400, skipping 200 batches (rollback 1/3)"
    )
    assert agent_records.parse(line.encode()).is_rollback and agent_records.might_be_relaunch(
        line.encode().encode()
    )


def test_after_a_rollback_the_abandoned_stretchs_checkpoints_are_never_resumed_from() -> None:
    import threading

    from arena_ls.agent.attempts import RunRecord
    from arena_ls.run.rundir import RunSpec, RunState

    spec = RunSpec(run_id="r", job_id="j", job_name="j", kind="train", argv=[], cwd=".", checkpoint_history=8)
    record = RunRecord(
        spec, RunState(run_id="r", job_id="j"), threading.RLock(), lambda e: None, lambda: None
    )
    for step in (40, 50, 61):
        record.add_checkpoint(rec(step))
    record.abandoned = (40, 100.0)  # rolled back to 40 at t=100: 50 and 61 were announced before
    record.add_checkpoint(CheckpointRecord(50, "ckpt-50.pt", 200.0, bytes=1))  # saved again after it
    assert [(r.step, r.at) for r in record.resume_candidates()] == [(50, 200.0), (40, 40.0)]
