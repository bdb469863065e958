"""The relaunch policy (``agent/relaunch.py``), case by case: pure, no process, no file."""

from __future__ import annotations

from typing import Any

from arena_ls.agent.relaunch import CrashFacts, Stop, decide, needs_saved_file
from arena_ls.agent.watchdog import GiveUp, GiveUpReason, Relaunch, Watchdog, WatchdogRules


def watchdog(max_restarts: int = 3, kind: str = "train", resume: bool = True) -> Watchdog:
    args = ["--resume", "--start-step", "{step}"] if resume else []
    return Watchdog(
        WatchdogRules.for_job(kind=kind, resume_args=args, max_restarts=max_restarts, backoff_seconds=5)
    )


def facts(**given: Any) -> CrashFacts:
    fields: dict[str, Any] = {
        "job_checkpoint": None,
        "run_checkpoint": None,
        "run_start": None,
        "launched_with_resume": False,
        "announced": True,
        "by_signal": False,
        "last_line": "Traceback: boom",
    }
    fields.update(given)
    return CrashFacts(**fields)


def test_a_kill_after_a_resume_relaunches_at_the_jobs_checkpoint_never_from_scratch() -> None:
    """Issue case 1: resumed from 600 (the job's checkpoint), kill -9 at ~700, nothing announced."""
    crash = facts(job_checkpoint=600, run_start=600, launched_with_resume=True, by_signal=True)
    decision = decide(crash, watchdog())
    assert isinstance(decision, Relaunch) and decision.start_step == 600


def test_the_latest_of_the_jobs_and_the_runs_checkpoints_is_where_a_relaunch_resumes() -> None:
    assert facts(job_checkpoint=600, run_checkpoint=800).known_step == 800
    assert facts(job_checkpoint=900, run_checkpoint=800).known_step == 900
    assert facts(run_start=50, run_checkpoint=None).known_step == 50
    decision = decide(facts(job_checkpoint=600, run_checkpoint=800), watchdog())
    assert isinstance(decision, Relaunch) and decision.start_step == 800


def test_a_job_checkpoint_alone_makes_a_relaunch_from_scratch_impossible() -> None:
    """The run announced nothing (a stop-only trainer) yet the job has a checkpoint."""
    decision = decide(facts(job_checkpoint=600, announced=True), watchdog())
    assert isinstance(decision, Relaunch) and decision.start_step == 600
    assert "from scratch" not in decision.describe()


def test_a_trainer_that_refuses_its_start_step_is_not_relaunched() -> None:
    """Issue case 2: --start-step 50 while the checkpoint is at 600: exit 2 before any progress."""
    line = "error: checkpoint is at step 600, not 50"
    crash = facts(run_start=50, launched_with_resume=True, announced=False, last_line=line)
    decision = decide(crash, watchdog())
    assert isinstance(decision, Stop)
    assert (decision.failure.kind, decision.failure.evidence) == ("resume-refused", line)


def test_a_refusal_is_a_refusal_even_where_the_watchdog_is_off() -> None:
    crash = facts(job_checkpoint=600, launched_with_resume=True, announced=False)
    decision = decide(crash, watchdog(max_restarts=0))
    assert isinstance(decision, Stop) and decision.failure.kind == "resume-refused"


def test_a_signal_before_any_progress_is_a_crash_not_a_refusal() -> None:
    """kill -9 (or the OOM killer) during a resumed trainer's start-up: it did not refuse."""
    crash = facts(job_checkpoint=600, launched_with_resume=True, announced=False, by_signal=True)
    decision = decide(crash, watchdog())
    assert isinstance(decision, Relaunch) and decision.start_step == 600


def test_a_fresh_launch_that_crashes_before_progress_is_not_a_refusal() -> None:
    decision = decide(facts(launched_with_resume=False, announced=False), watchdog())
    assert isinstance(decision, Relaunch) and decision.start_step is None


def test_a_saved_file_with_no_known_checkpoint_ends_resume_unknown_naming_it() -> None:
    crash = facts(saved_file="checkpoints/ckpt.json")
    assert needs_saved_file(crash)
    decision = decide(crash, watchdog())
    assert isinstance(decision, Stop) and decision.failure.kind == "resume-unknown"
    assert decision.failure.evidence.startswith("checkpoints/ckpt.json exists")


def test_no_checkpoint_and_no_saved_file_relaunches_from_scratch() -> None:
    decision = decide(facts(), watchdog())
    assert isinstance(decision, Relaunch) and decision.start_step is None
    assert "from scratch" in decision.describe()


def test_a_known_checkpoint_needs_no_look_for_files() -> None:
    assert not needs_saved_file(facts(job_checkpoint=5))
    assert not needs_saved_file(facts(run_checkpoint=5))
    assert not needs_saved_file(facts(launched_with_resume=True, announced=False))
    decision = decide(facts(run_checkpoint=5, saved_file="ckpt.pt"), watchdog())
    assert isinstance(decision, Relaunch) and decision.start_step == 5


def test_a_task_or_a_job_without_resume_is_never_relaunched() -> None:
    for dog in (watchdog(kind="task"), watchdog(resume=False), watchdog(max_restarts=0)):
        decision = decide(facts(job_checkpoint=600, saved_file="ckpt.pt"), dog)
        assert isinstance(decision, GiveUp) and decision.reason is GiveUpReason.NOT_RELAUNCHABLE
        assert decision.step == 600


def test_crashing_again_at_the_jobs_checkpoint_is_a_crash_loop() -> None:
    dog = watchdog()
    first = decide(facts(job_checkpoint=600, by_signal=True), dog)
    assert isinstance(first, Relaunch) and first.start_step == 600
    again = decide(facts(job_checkpoint=600, launched_with_resume=True, by_signal=True), dog)
    assert isinstance(again, GiveUp) and again.reason is GiveUpReason.CRASH_LOOP


def test_the_budget_still_bounds_relaunches_without_progress() -> None:
    dog = watchdog(max_restarts=1)
    assert isinstance(decide(facts(), dog), Relaunch)
    assert isinstance(decide(facts(run_checkpoint=5), dog), Relaunch), "progress restores the budget"
    spent = decide(facts(run_checkpoint=4), dog)
    assert isinstance(spent, GiveUp) and spent.reason is GiveUpReason.BUDGET_SPENT
