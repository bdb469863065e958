"""The cluster follower takes the same relaunch decision as a local agent (``agent/relaunch.py``).

A fake ``JobsClient`` plays Ray (as in ``test_follower_misbehaving_cluster.py``); the
follower is real and its run folder on disk.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from arena_ls.cluster import ray_trainer
from arena_ls.run.rundir import CheckpointRecord, StateFolder
from arena_ls.run.states import RunStatus
from tests.cluster.test_follower_misbehaving_cluster import (
    RUNNING,
    SUCCEEDED,
    FakeJobs,
    follow_to_the_end,
    follower,
    make_run,
)

RESUME = ["--resume", "--start-step", "{step}"]
REFUSED = {
    "status": "FAILED",
    "driver_exit_code": 2,
    "message": "Job entrypoint command failed with exit code 2",
}
CRASHED = {
    "status": "FAILED",
    "driver_exit_code": 1,
    "message": "Job entrypoint command failed with exit code 1",
}


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_trainer, "POLL_SECONDS", 0.005)


@pytest.fixture
def folder(tmp_path: Path) -> StateFolder:
    state = StateFolder(tmp_path / ".aide" / "training")
    state.ensure()  # as a server makes it before any run
    return state


class Jobs(FakeJobs):
    """Records each submission's entrypoint; its log is ``lines`` (the same for every submission)."""

    def __init__(self, infos: list[dict[str, Any] | Exception], lines: str = "") -> None:
        super().__init__(infos)
        self.lines = lines
        self.entrypoints: list[str] = []

    def submit(self, payload: dict[str, Any]) -> str:
        self.entrypoints.append(str(payload["entrypoint"]))
        return super().submit(payload)

    def logs(self, submission_id: str) -> str:
        return self.lines


def _checkpoint(step: int) -> CheckpointRecord:
    return CheckpointRecord(step=step, path="ckpt.pt", at=time.time(), run_id="earlier")


def test_a_cluster_trainer_that_refuses_to_resume_is_not_submitted_again(
    folder: StateFolder, tmp_path: Path
) -> None:
    folder.record_job_checkpoint("job", _checkpoint(600))
    run = make_run(
        folder, tmp_path, resume_args=RESUME, resumed_from_step=600, job_checkpoint=_checkpoint(600),
        max_restarts=3, backoff_seconds=0.0,
    )  # fmt: skip
    jobs = Jobs([REFUSED], lines="error: checkpoint is at step 700, not 600\n")
    follow_to_the_end(follower(run, jobs).run)
    state = run.read_state()
    assert (state.status, state.restarts) == (RunStatus.CRASHED, 0)
    assert state.failure is not None and state.failure.kind == "resume-refused"
    assert state.failure.evidence == "error: checkpoint is at step 700, not 600"
    assert len(jobs.submitted) == 1


def test_a_cluster_crash_is_resubmitted_at_the_jobs_checkpoint_never_from_scratch(
    folder: StateFolder, tmp_path: Path
) -> None:
    """The run announced nothing of its own (a stop-only announcer); the job's checkpoint counts."""
    run = make_run(
        folder, tmp_path, resume_args=RESUME, resumed_from_step=600, job_checkpoint=_checkpoint(600),
        max_restarts=3, backoff_seconds=0.0,
    )  # fmt: skip
    progress = '@arena {"event": "progress", "step": 650, "total": 1000}\n'
    jobs = Jobs([RUNNING, CRASHED, RUNNING, SUCCEEDED], lines=progress)
    follow_to_the_end(follower(run, jobs).run)
    assert run.read_state().status is RunStatus.SUCCEEDED
    assert len(jobs.entrypoints) == 2
    assert jobs.entrypoints[1].endswith("--resume --start-step 600"), jobs.entrypoints[1]


def test_a_cluster_crash_with_no_known_checkpoint_but_an_announced_path_is_resume_unknown(
    folder: StateFolder, tmp_path: Path
) -> None:
    run = make_run(
        folder, tmp_path, resume_args=RESUME, checkpoint_paths=["checkpoints/ckpt.pt"],
        max_restarts=3, backoff_seconds=0.0,
    )  # fmt: skip
    jobs = Jobs([RUNNING, CRASHED], lines='@arena {"event": "progress", "step": 5, "total": 1000}\n')
    follow_to_the_end(follower(run, jobs).run)
    state = run.read_state()
    assert state.status is RunStatus.CRASHED
    assert state.failure is not None and state.failure.kind == "resume-unknown"
    assert state.failure.evidence.startswith("checkpoints/ckpt.pt (announced by an earlier run, on cluster")
    assert len(jobs.submitted) == 1, "never resubmitted from step 0 over it"
