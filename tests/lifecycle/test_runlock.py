"""The rules of the workspace lock (pure ``judge``) and ``RunLock`` on real files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import attrs
import pytest

from arena_ls.run.rundir import RunSpec, RunState
from arena_ls.run.runlock import (
    CREATE_GRACE,
    START_GRACE,
    WRITE_GRACE,
    HolderFacts,
    LockRecord,
    RunHeld,
    RunLock,
    Verdict,
    judge,
    parse_lock,
)
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

ALIVE = {(100, 1.0), (200, 2.0)}


def alive(pid: int | None, create_time: float | None) -> bool:
    return (pid, create_time) in ALIVE


NO_RUN = HolderFacts(run_exists=False)
RUN_NO_STATE = HolderFacts(run_exists=True)


def lock(**fields: object) -> LockRecord:
    return LockRecord(run_id="job-1", **fields)  # type: ignore[arg-type]


# -- judge: the rules ------------------------------------------------------------------------


def test_an_unreadable_lock_is_held_while_it_may_be_being_written_then_damaged() -> None:
    assert judge(None, 0.1, NO_RUN, alive).verdict is Verdict.HELD
    assert judge(None, WRITE_GRACE + 1, NO_RUN, alive).verdict is Verdict.DAMAGED


def test_a_lock_whose_run_ended_is_stale_whoever_is_alive() -> None:
    final = HolderFacts(run_exists=True, final=True, agent_pid=100, agent_create_time=1.0)
    assert judge(lock(pid=200, create_time=2.0), 0.0, final, alive).verdict is Verdict.STALE


def test_the_agent_in_the_state_decides_by_pid_and_creation_time() -> None:
    live = HolderFacts(run_exists=True, agent_pid=100, agent_create_time=1.0)
    assert judge(lock(), 999.0, live, alive).verdict is Verdict.HELD
    reused = HolderFacts(run_exists=True, agent_pid=100, agent_create_time=7.0)  # same pid, another process
    assert judge(lock(pid=200, create_time=2.0), 0.0, reused, alive).verdict is Verdict.STALE


def test_a_cluster_run_whose_agent_is_gone_keeps_the_lock_until_it_ends() -> None:
    """The job runs on the cluster while a server starts a new agent: no second job meanwhile."""
    gone = HolderFacts(run_exists=True, agent_pid=100, agent_create_time=7.0, outlives_agent=True)
    assert judge(lock(pid=200, create_time=2.0), 0.0, gone, alive).verdict is Verdict.HELD
    ended = attrs.evolve(gone, final=True)
    assert judge(lock(pid=200, create_time=2.0), 0.0, ended, alive).verdict is Verdict.STALE


def test_the_agent_in_the_lock_counts_when_the_state_is_unreadable() -> None:
    record = lock(pid=9, create_time=9.0, agent_pid=100, agent_create_time=1.0)
    assert judge(record, 999.0, RUN_NO_STATE, alive).verdict is Verdict.HELD
    dead_agent = lock(pid=200, create_time=2.0, agent_pid=101, agent_create_time=1.0)
    assert judge(dead_agent, 0.0, RUN_NO_STATE, alive).verdict is Verdict.STALE


def test_a_run_not_known_yet_is_never_a_reason_to_break_a_live_creators_lock() -> None:
    creating = lock(pid=200, create_time=2.0)
    assert judge(creating, 0.5, NO_RUN, alive).verdict is Verdict.HELD
    assert judge(creating, 0.5, RUN_NO_STATE, alive).verdict is Verdict.HELD
    assert judge(creating, CREATE_GRACE + 1, RUN_NO_STATE, alive).verdict is Verdict.STALE


def test_a_dead_creator_without_a_run_is_stale_with_a_run_it_waits_for_a_starting_agent() -> None:
    dead = lock(pid=300, create_time=3.0)
    assert judge(dead, 0.0, NO_RUN, alive).verdict is Verdict.STALE
    assert judge(dead, 1.0, RUN_NO_STATE, alive).verdict is Verdict.HELD
    assert judge(dead, START_GRACE + 1, RUN_NO_STATE, alive).verdict is Verdict.STALE


def test_a_plain_run_id_lock_is_judged_by_its_run_and_its_age() -> None:
    legacy = parse_lock(b"job-1\n")
    assert legacy == LockRecord(run_id="job-1")
    assert judge(legacy, 1.0, NO_RUN, alive).verdict is Verdict.HELD
    assert judge(legacy, START_GRACE + 1, NO_RUN, alive).verdict is Verdict.STALE


@pytest.mark.parametrize(
    "raw",
    [b"", b"\x00\xff\xfe", b"{not json", b"[]", b'{"runId": 5}', b'{"runId": "../x"}', b"a b c"],
)
def test_garbage_is_not_a_lock_record(raw: bytes) -> None:
    assert parse_lock(raw) is None


def test_a_lock_record_round_trips_and_ignores_bad_numbers() -> None:
    record = LockRecord("job-1", 10, 1.5, 11, 2.5)
    assert parse_lock(record.to_json()) == record
    odd = json.dumps({"runId": "job-1", "pid": -5, "createTime": "x", "agentPid": True}).encode()
    assert parse_lock(odd) == LockRecord("job-1")


# -- RunLock on files -----------------------------------------------------------------------------


def spec_of(run_id: str) -> RunSpec:
    return RunSpec(run_id=run_id, job_id="job", job_name="Job", kind="task", argv=["x"], cwd="/")


def test_a_claimed_run_appears_whole_and_holds_the_lock(tmp_path: Path) -> None:
    runlock = RunLock(StateFolder(tmp_path))
    run_dir = runlock.claim("job", spec_of)
    assert run_dir.read_spec().run_id == run_dir.run_id
    assert runlock.holder() == run_dir.run_id
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [run_dir.run_id], "no staging left"
    with pytest.raises(RunHeld) as held:
        runlock.claim("job", spec_of)
    assert held.value.run_id == run_dir.run_id
    assert len(list((tmp_path / "runs").iterdir())) == 1, "a refused claim leaves nothing"
    runlock.release("someone-else")
    assert runlock.holder() == run_dir.run_id
    runlock.release(run_dir.run_id)
    assert runlock.holder() is None


def test_a_failed_spec_write_leaves_neither_folder_nor_lock(tmp_path: Path) -> None:
    runlock = RunLock(StateFolder(tmp_path))

    def broken(run_id: str) -> RunSpec:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        runlock.claim("job", broken)
    assert list((tmp_path / "runs").iterdir()) == []
    assert not (tmp_path / "active.lock").exists()


def test_the_lock_of_a_dead_agent_is_broken_and_a_live_ones_is_not(tmp_path: Path) -> None:
    folder = StateFolder(tmp_path)
    first = RunLock(folder, alive=lambda pid, ct: True).claim("job", spec_of)
    first.write_state(RunState(run_id=first.run_id, job_id="job", status=RunStatus.RUNNING,
                               agent_pid=100, agent_create_time=1.0))  # fmt: skip
    with pytest.raises(RunHeld):
        RunLock(folder, alive=alive).claim("job", spec_of)
    first.write_state(RunState(run_id=first.run_id, job_id="job", status=RunStatus.RUNNING,
                               agent_pid=100, agent_create_time=5.0))  # fmt: skip
    second = RunLock(folder, alive=alive).claim("job", spec_of)
    assert RunLock(folder).holder() == second.run_id


def test_a_recorded_agent_outlives_its_creator(tmp_path: Path) -> None:
    folder = StateFolder(tmp_path)
    run_dir = RunLock(folder).claim("job", spec_of)
    RunLock(folder).record_agent(run_dir.run_id, 100, 1.0)
    payload = json.loads((tmp_path / "active.lock").read_text())
    assert (payload["agentPid"], payload["agentCreateTime"]) == (100, 1.0)
    # The creator (this process) counts as dead here, the agent as alive: still held.
    with pytest.raises(RunHeld):
        RunLock(folder, alive=alive).claim("job", spec_of)


@pytest.mark.parametrize("kind", ["garbage", "directory", "empty"])
def test_a_damaged_lock_is_moved_aside_and_reported_once(tmp_path: Path, kind: str) -> None:
    folder = StateFolder(tmp_path)
    folder.ensure()
    lock_path = tmp_path / "active.lock"
    if kind == "directory":
        lock_path.mkdir()
    else:
        lock_path.write_bytes(b"" if kind == "empty" else b"\x00\xffgarbage")
        old = time.time() - 3600
        os.utime(lock_path, (old, old))
    reports: list[str] = []
    run_dir = RunLock(folder, report=reports.append).claim("job", spec_of)
    assert RunLock(folder).holder() == run_dir.run_id
    assert len(reports) == 1 and "active.lock" in reports[0] and "moved it aside" in reports[0]


def test_a_fresh_unreadable_lock_is_left_alone(tmp_path: Path) -> None:
    folder = StateFolder(tmp_path)
    folder.ensure()
    (tmp_path / "active.lock").write_bytes(b"")
    with pytest.raises(RunHeld):
        RunLock(folder).claim("job", spec_of)


def test_staging_left_by_a_dead_claimant_is_swept(tmp_path: Path) -> None:
    folder = StateFolder(tmp_path)
    folder.ensure()
    staging = tmp_path / "runs" / ".new-job-1"
    staging.mkdir()
    assert folder.list_runs() == [], "a run being built is not listed"
    RunLock(folder).sweep_staging(older_than=3600)
    assert staging.exists()
    RunLock(folder).sweep_staging(older_than=-1)
    assert not staging.exists()
