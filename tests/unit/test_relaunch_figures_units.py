"""Each relaunch's figures (downtime, steps lost), pure: the record, the metrics' match, the words."""

from __future__ import annotations

import threading

from arena_ls.agent.attempts import RunRecord
from arena_ls.client.plot import Resume
from arena_ls.client.render import relaunch_costs
from arena_ls.client.tables import relaunch_rows
from arena_ls.protocol.metrics_request import _relaunch
from arena_ls.run.rundir import MAX_RELAUNCH_RECORDS, RelaunchRecord, RunSpec, RunState


def record(state: RunState) -> RunRecord:
    spec = RunSpec(run_id="r", job_id="j", job_name="j", kind="train", argv=["x"], cwd=".")
    return RunRecord(spec, state, threading.RLock(), lambda event: None, lambda: None)


def test_a_relaunch_records_the_steps_past_its_checkpoint_and_its_downtime_at_first_progress() -> None:
    state = RunState(run_id="r", job_id="j", step=47, ended_at=1000.0)
    run = record(state)
    run.relaunched(40)
    (relaunch,) = state.relaunches
    assert (relaunch.crashed_at, relaunch.from_step, relaunch.steps_lost) == (1000.0, 40, 7)
    assert relaunch.downtime_seconds is None  # not resumed yet
    run.progressed(1004.25)
    run.progressed(1009.0)  # only the first progress after it counts
    assert relaunch.downtime_seconds == 4.25


def test_a_relaunch_from_scratch_lost_every_step_and_one_before_any_step_lost_none() -> None:
    state = RunState(run_id="r", job_id="j", step=12)
    record(state).relaunched(None)
    assert state.relaunches[0].steps_lost == 12
    fresh = RunState(run_id="r", job_id="j")
    record(fresh).relaunched(None)
    assert fresh.relaunches[0].steps_lost is None


def test_a_crash_before_the_checkpoint_s_step_loses_nothing() -> None:
    state = RunState(run_id="r", job_id="j", step=38)
    record(state).relaunched(40)
    assert state.relaunches[0].steps_lost == 0


def test_progress_without_a_relaunch_records_nothing_and_the_records_are_bounded() -> None:
    state = RunState(run_id="r", job_id="j", step=1, ended_at=5.0)
    run = record(state)
    run.progressed(10.0)
    assert state.relaunches == []
    for _ in range(MAX_RELAUNCH_RECORDS + 5):
        run.relaunched(0)
    assert len(state.relaunches) == MAX_RELAUNCH_RECORDS


def test_the_metrics_match_a_logged_relaunch_to_its_record_by_step_and_time() -> None:
    records = [RelaunchRecord(100.0, 99.0, 40, 7, 3.5), RelaunchRecord(200.0, 199.0, 40, 2, 1.0)]
    assert _relaunch(40, 200.1, records)["stepsLost"] == 2
    assert _relaunch(40, 100.0, records)["downtimeSeconds"] == 3.5
    unmatched = _relaunch(80, 200.0, records)  # a run of an earlier agent: no record
    assert (unmatched["stepsLost"], unmatched["downtimeSeconds"]) == (None, None)
    scratch = _relaunch(0, 300.0, [RelaunchRecord(300.0, None, None, 5, None)])
    assert scratch["stepsLost"] == 5


def test_the_words_say_what_is_known() -> None:
    assert relaunch_costs(1, 2.44) == ["1 step lost", "2.4 s down"]
    assert relaunch_costs(None, None) == []
    rows = relaunch_rows(
        [
            {"fromStep": 40, "stepsLost": 3, "downtimeSeconds": 2.0},
            {"fromStep": None, "stepsLost": None, "downtimeSeconds": None},
            "junk",
        ]
    )
    assert rows == ["from step 40 · 3 steps lost · 2.0 s down", "from scratch · not resumed yet"]
    assert relaunch_rows(None) == []
    assert Resume(40, "run-1").words() == "resume run-1"
    assert Resume(40, "run-1", relaunch=True).words() == "relaunch"
