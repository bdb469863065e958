"""The job's checkpoint record is written before the run's state that goes with it.

A server that sees a run's new state (a stop's ``stopped``) may start the next
run at once, and that run resumes from the job's record: were the state first,
the next run could resume from the record's older checkpoint (it did, once, in
``test_stop_with_a_checkpoint_then_resume_on_the_cluster``: from step 10, not
the stop's 13).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from arena_ls.agent import statewriter
from arena_ls.run.rundir import CheckpointRecord, RunDir, RunState
from arena_ls.run.state_folder import StateFolder


def test_the_job_record_is_written_before_the_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    folder = StateFolder(tmp_path / "state")
    folder.ensure()
    order: list[str] = []
    real_write = statewriter.write_json_atomic
    real_record = StateFolder.record_job_checkpoint

    def write_state(path: Path, payload: object) -> None:
        order.append("state")
        real_write(path, payload)

    def record(self: StateFolder, job_id: str, checkpoint: CheckpointRecord, keep: int = 8) -> None:
        order.append("job record")
        real_record(self, job_id, checkpoint, keep)

    monkeypatch.setattr(statewriter, "write_json_atomic", write_state)
    monkeypatch.setattr(StateFolder, "record_job_checkpoint", record)
    checkpoint = CheckpointRecord(step=13, path="ckpt.pt", at=1.0)
    state = RunState(run_id="r", job_id="job", last_checkpoint=checkpoint)
    writer = statewriter.StateWriter(run, folder, state, threading.RLock(), lambda _: None)
    writer.request(("job", checkpoint))
    assert writer.close_final(patience_without_folder=0.0)
    assert order[:2] == ["job record", "state"]
    known = folder.job_checkpoint("job")
    assert known is not None and known.step == 13


def test_a_full_disk_at_the_final_write_still_records_the_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job record has no reserve: on a full disk the final state goes out without it."""
    from arena_ls.agent.reserve import StateReserve

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    folder = StateFolder(tmp_path / "state")

    def no_space(self: StateFolder, job_id: str, checkpoint: CheckpointRecord, keep: int = 8) -> None:
        raise OSError(28, "No space left on device")

    def state_fails(path: Path, payload: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(StateFolder, "record_job_checkpoint", no_space)
    monkeypatch.setattr(statewriter, "write_json_atomic", state_fails)
    store = StateReserve(run.path)
    store.make()
    checkpoint = CheckpointRecord(step=13, path="ckpt.pt", at=1.0)
    state = RunState(run_id="r", job_id="job", last_checkpoint=checkpoint)
    writer = statewriter.StateWriter(run, folder, state, threading.RLock(), lambda _: None, reserve=store)
    writer.request(("job", checkpoint))
    assert writer.close_final(patience_without_folder=0.0)
    assert writer.reserve_used
    assert b'"lastCheckpoint"' in run.state_path.read_bytes()


def test_checkpoints_announced_while_the_writer_lags_each_reach_the_job_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three saves announced while a write is held (a slow disk, a loaded machine): the job's
    history gets all three, in order. It kept only the newest, so a torn last save had nothing
    to fall back to (``test_a_start_that_resumes_verifies_first_and_refuses_a_torn_checkpoint``
    ended ``resume-unknown`` once in 400 runs)."""
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    folder = StateFolder(tmp_path / "state")
    folder.ensure()
    held, release = threading.Event(), threading.Event()
    real_write = statewriter.write_json_atomic

    def slow_state(path: Path, payload: object) -> None:
        held.set()
        assert release.wait(30), "the test never released the write"
        real_write(path, payload)

    monkeypatch.setattr(statewriter, "write_json_atomic", slow_state)
    state = RunState(run_id="r", job_id="job")
    writer = statewriter.StateWriter(run, folder, state, threading.RLock(), lambda _: None)
    writer.request()
    assert held.wait(30), "the first write never began"
    for step in (20, 40, 42):
        writer.request(("job", CheckpointRecord(step=step, path=f"ckpt-{step}.json", at=float(step))))
    release.set()
    assert writer.close_final(patience_without_folder=0.0)
    assert [record.step for record in folder.job_history("job")] == [20, 40, 42]
    assert folder.job_paths("job") == ["ckpt-20.json", "ckpt-40.json", "ckpt-42.json"]


def test_checkpoints_a_failed_write_held_are_recorded_before_later_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write of the job's record that fails is retried with its checkpoints first."""
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    folder = StateFolder(tmp_path / "state")
    folder.ensure()
    real_record = StateFolder.record_job_checkpoint
    failures = [OSError(28, "No space left on device")]

    def record(self: StateFolder, job_id: str, checkpoint: CheckpointRecord, keep: int = 8) -> None:
        if checkpoint.step == 40 and failures:
            raise failures.pop()
        real_record(self, job_id, checkpoint, keep)

    monkeypatch.setattr(StateFolder, "record_job_checkpoint", record)
    monkeypatch.setattr(statewriter, "RETRY_FIRST_SECONDS", 0.01)
    state = RunState(run_id="r", job_id="job")
    writer = statewriter.StateWriter(run, folder, state, threading.RLock(), lambda _: None)
    writer.request(("job", CheckpointRecord(step=20, path="ckpt-20.json", at=20.0)))
    writer.request(("job", CheckpointRecord(step=40, path="ckpt-40.json", at=40.0)))
    writer.request(("job", CheckpointRecord(step=60, path="ckpt-60.json", at=60.0)))
    assert writer.close_final(patience_without_folder=0.0)
    assert [record.step for record in folder.job_history("job")] == [20, 40, 60]
