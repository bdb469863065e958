"""The watchdog's rules, one test each: no process started, no real clock read."""

from __future__ import annotations

import pytest

from arena_ls.agent.watchdog import (
    BACKOFF_CAP_SECONDS,
    BACKOFF_POLL_SECONDS,
    GiveUp,
    GiveUpReason,
    Relaunch,
    Watchdog,
    WatchdogRules,
)


def train_rules(max_restarts: int = 3, backoff: float = 5.0) -> WatchdogRules:
    return WatchdogRules.for_job(
        kind="train", resume_args=["--resume"], max_restarts=max_restarts, backoff_seconds=backoff
    )


def relaunch(decision: GiveUp | Relaunch) -> Relaunch:
    assert isinstance(decision, Relaunch), decision
    return decision


def give_up(decision: GiveUp | Relaunch) -> GiveUp:
    assert isinstance(decision, GiveUp), decision
    return decision


class FakeHost:
    """A clock that moves only when the watchdog pauses, and a stop request due at a set time."""

    def __init__(self, stop_at: float | None = None) -> None:
        self.now = 1000.0
        self.stop_at = stop_at
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds

    def stop_requested(self) -> bool:
        return self.stop_at is not None and self.now >= self.stop_at


# -- who is relaunched at all ---------------------------------------------------------------


def test_a_task_is_never_relaunched() -> None:
    rules = WatchdogRules.for_job(kind="task", resume_args=["--resume"], max_restarts=3, backoff_seconds=1)
    assert give_up(Watchdog(rules).after_crash(100)).reason is GiveUpReason.NOT_RELAUNCHABLE


def test_a_train_job_without_resume_args_is_never_relaunched() -> None:
    rules = WatchdogRules.for_job(kind="train", resume_args=[], max_restarts=3, backoff_seconds=1)
    assert give_up(Watchdog(rules).after_crash(100)).reason is GiveUpReason.NOT_RELAUNCHABLE


def test_no_restarts_allowed_means_no_relaunch() -> None:
    decision = Watchdog(train_rules(max_restarts=0)).after_crash(100)
    assert give_up(decision).reason is GiveUpReason.NOT_RELAUNCHABLE


def test_a_train_job_with_resume_args_is_relaunched_from_its_checkpoint() -> None:
    decision = relaunch(Watchdog(train_rules()).after_crash(200))
    assert decision.start_step == 200
    assert decision.restart == 1
    assert (decision.used, decision.budget) == (1, 3)
    assert decision.describe() == "restarting from step 200 (attempt 1/3) in 5s"


def test_without_a_checkpoint_the_relaunch_starts_from_scratch() -> None:
    decision = relaunch(Watchdog(train_rules()).after_crash(None))
    assert decision.start_step is None
    assert decision.describe() == "restarting from scratch (no checkpoint yet) (attempt 1/3) in 5s"


# -- the budget ------------------------------------------------------------------------------


def test_checkpoint_progress_after_a_relaunch_restores_the_budget() -> None:
    watchdog = Watchdog(train_rules(max_restarts=2))
    relaunch(watchdog.after_crash(100))
    assert watchdog.budget_left == 1
    # The relaunch from 100 got to a checkpoint at 200 before crashing: the budget is whole again.
    decision = relaunch(watchdog.after_crash(200))
    assert (decision.used, watchdog.budget_left) == (1, 1)
    decision = relaunch(watchdog.after_crash(300))
    assert (decision.used, watchdog.budget_left) == (1, 1)


def test_a_spent_budget_gives_up() -> None:
    watchdog = Watchdog(train_rules(max_restarts=1))
    watchdog.budget_left = 0  # spent before: the next crash finds none left
    decision = give_up(watchdog.after_crash(100))
    assert decision.reason is GiveUpReason.BUDGET_SPENT
    assert decision.step == 100


def test_a_first_checkpoint_after_a_relaunch_from_scratch_is_progress() -> None:
    watchdog = Watchdog(train_rules(max_restarts=2))
    relaunch(watchdog.after_crash(None))  # from scratch
    assert watchdog.budget_left == 1
    relaunch(watchdog.after_crash(50))  # the relaunch from scratch reached a checkpoint: progress
    assert watchdog.budget_left == 1  # restored to 2, then one used


def test_no_progress_does_not_restore_the_budget() -> None:
    watchdog = Watchdog(train_rules(max_restarts=3))
    relaunch(watchdog.after_crash(300))
    # An older checkpoint (a trainer that went back) is not progress; it is not a crash loop either.
    decision = relaunch(watchdog.after_crash(200))
    assert (decision.used, watchdog.budget_left) == (2, 1)
    decision = relaunch(watchdog.after_crash(100))
    assert (decision.used, watchdog.budget_left) == (3, 0)
    assert give_up(watchdog.after_crash(50)).reason is GiveUpReason.BUDGET_SPENT


# -- the crash loop --------------------------------------------------------------------------


def test_crashing_again_at_the_relaunch_checkpoint_is_a_crash_loop() -> None:
    watchdog = Watchdog(train_rules())
    relaunch(watchdog.after_crash(200))
    decision = give_up(watchdog.after_crash(200))
    assert decision.reason is GiveUpReason.CRASH_LOOP
    assert decision.crash_loop_evidence() == "crashed again at step 200 after a relaunch from it"


def test_crashing_again_before_any_checkpoint_after_a_relaunch_from_scratch_is_a_crash_loop() -> None:
    watchdog = Watchdog(train_rules())
    relaunch(watchdog.after_crash(None))
    decision = give_up(watchdog.after_crash(None))
    assert decision.reason is GiveUpReason.CRASH_LOOP
    assert decision.crash_loop_evidence() == (
        "crashed again at the same point (no checkpoint) after a relaunch from it"
    )


def test_the_first_crash_is_never_a_crash_loop() -> None:
    assert isinstance(Watchdog(train_rules()).after_crash(None), Relaunch)


def test_a_crash_loop_wins_over_a_spent_budget() -> None:
    watchdog = Watchdog(train_rules(max_restarts=1))
    relaunch(watchdog.after_crash(100))
    assert give_up(watchdog.after_crash(100)).reason is GiveUpReason.CRASH_LOOP


# -- the backoff -----------------------------------------------------------------------------


def test_the_backoff_doubles_with_every_relaunch_of_the_run() -> None:
    watchdog = Watchdog(train_rules(max_restarts=5, backoff=2.0))
    delays = [relaunch(watchdog.after_crash(step)).delay for step in (10, 20, 30, 40)]
    assert delays == [2.0, 4.0, 8.0, 16.0]  # the budget was restored each time; the backoff was not


def test_the_backoff_is_capped() -> None:
    watchdog = Watchdog(train_rules(max_restarts=20, backoff=100.0))
    delays = [relaunch(watchdog.after_crash(step)).delay for step in (10, 20, 30, 40)]
    assert delays == [100.0, 200.0, BACKOFF_CAP_SECONDS, BACKOFF_CAP_SECONDS]


def test_the_restart_count_follows_every_relaunch() -> None:
    watchdog = Watchdog(train_rules(max_restarts=5))
    restarts = [relaunch(watchdog.after_crash(step)).restart for step in (10, 20, 30)]
    assert restarts == [1, 2, 3]


def test_sitting_out_the_backoff_waits_the_whole_delay_in_short_pauses() -> None:
    host = FakeHost()
    decision = relaunch(Watchdog(train_rules(backoff=1.0)).after_crash(10))
    assert Watchdog.sit_out(decision, host) is True
    assert sum(host.pauses) == pytest.approx(1.0)
    assert max(host.pauses) <= BACKOFF_POLL_SECONDS


def test_a_stop_request_during_the_backoff_cancels_the_relaunch() -> None:
    host = FakeHost(stop_at=1000.5)
    decision = relaunch(Watchdog(train_rules(backoff=10.0)).after_crash(10))
    assert Watchdog.sit_out(decision, host) is False
    assert host.now < 1000.5 + BACKOFF_POLL_SECONDS + 1e-9  # noticed at the next look, not at the end


def test_a_zero_backoff_relaunches_at_once() -> None:
    host = FakeHost(stop_at=0.0)  # a stop request already there is seen by the agent, not the wait
    decision = relaunch(Watchdog(train_rules(backoff=0.0)).after_crash(10))
    assert Watchdog.sit_out(decision, host) is True
    assert host.pauses == []


def test_the_relaunch_record_reads_back_to_its_start_step() -> None:
    """The server rewinds a run's step from the agent's relaunch record (``restarting``, typed)."""
    from arena_ls.run.agent_records import parse

    def line(step: int | None) -> str:
        return Relaunch(start_step=step, delay=2.0, restart=1, used=1, budget=3).event().encode()

    found = parse(line(500))
    assert found.is_relaunch and found.step == 500
    scratch = parse(line(None))
    assert scratch.is_relaunch and scratch.step is None


def test_a_resumed_watchdog_continues_the_recorded_position() -> None:
    """A revived agent (a cluster run) takes over the budget and the last relaunch's step."""
    rules = train_rules(max_restarts=3, backoff=1.0)
    watchdog = Watchdog.resumed(rules, budget_left=1, restarts=2, relaunched_from=500, relaunched=True)
    crash_loop = watchdog.after_crash(500)
    assert isinstance(crash_loop, GiveUp) and crash_loop.reason is GiveUpReason.CRASH_LOOP
    fresh = Watchdog.resumed(rules, budget_left=None, restarts=0, relaunched_from=None, relaunched=False)
    first = fresh.after_crash(100)
    assert isinstance(first, Relaunch) and first.used == 1 and first.budget == 3
