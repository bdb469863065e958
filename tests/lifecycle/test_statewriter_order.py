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
