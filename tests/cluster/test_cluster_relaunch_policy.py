"""The cluster agent takes the same relaunch decision as a local agent (``agent/relaunch.py``).

A fake ``JobsClient`` plays Ray (as in ``test_cluster_agent_misbehaving.py``); the
agent is real and its run folder on disk.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from arena_ls.cluster import ray_trainer
from arena_ls.cluster.ckpt_remote import VERIFIES
from arena_ls.run.rundir import CheckpointRecord, RunDir
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.cluster.test_cluster_agent_misbehaving import (
    RUNNING,
    SUCCEEDED,
    FakeJobs,
    cluster_agent,
    follow_to_the_end,
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
    """Records each trainer submission's entrypoint; its log is ``lines`` (the same for every
    submission). A checkpoint reader's submission (``ckpt_remote``) runs here, in ``cwd``,
    as the cluster would run it (with this interpreter), and succeeds with its output."""

    def __init__(self, infos: list[dict[str, Any] | Exception], lines: str = "", cwd: Path = Path()) -> None:
        super().__init__(infos)
        self.lines = lines
        self.cwd = cwd
        self.entrypoints: list[str] = []
        self.readers: dict[str, str] = {}

    def submit(self, payload: dict[str, Any]) -> str:
        if VERIFIES in payload["metadata"]:
            argv = shlex.split(str(payload["entrypoint"]).removeprefix("exec "))
            argv[0] = sys.executable
            done = subprocess.run(argv, cwd=self.cwd, capture_output=True, text=True, timeout=60, check=True)
            self.readers[payload["submission_id"]] = done.stdout
            return str(payload["submission_id"])
        self.entrypoints.append(str(payload["entrypoint"]))
        return super().submit(payload)

    def info(self, submission_id: str) -> dict[str, Any]:
        return SUCCEEDED if submission_id in self.readers else super().info(submission_id)

    def logs(self, submission_id: str) -> str:
        return self.readers.get(submission_id, self.lines)


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
    (tmp_path / "ckpt.pt").write_text("step 600\n")  # on the cluster, where the reader looks
    jobs = Jobs([REFUSED], lines="error: checkpoint is at step 700, not 600\n", cwd=tmp_path)
    follow_to_the_end(cluster_agent(run, jobs).run)
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
    (tmp_path / "ckpt.pt").write_text("step 600\n")
    jobs = Jobs([RUNNING, CRASHED, RUNNING, SUCCEEDED], lines=progress, cwd=tmp_path)
    follow_to_the_end(cluster_agent(run, jobs).run)
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
    follow_to_the_end(cluster_agent(run, jobs).run)
    state = run.read_state()
    assert state.status is RunStatus.CRASHED
    assert state.failure is not None and state.failure.kind == "resume-unknown"
    assert state.failure.evidence.startswith("checkpoints/ckpt.pt (announced by an earlier run, on cluster")
    assert len(jobs.submitted) == 1, "never resubmitted from step 0 over it"


def test_a_start_that_resumes_from_a_checkpoint_the_cluster_lacks_submits_no_trainer(
    folder: StateFolder, tmp_path: Path
) -> None:
    """Contract 8.2: verified before any resume, a start that resumes included (on main before
    issue 36c the cluster's files were not looked at: the trainer was submitted onto nothing)."""
    run = make_run(
        folder, tmp_path, resume_args=RESUME, resumed_from_step=600, job_checkpoint=_checkpoint(600),
        max_restarts=3, backoff_seconds=0.0,
    )  # fmt: skip
    jobs = Jobs([RUNNING, SUCCEEDED], cwd=tmp_path)
    follow_to_the_end(cluster_agent(run, jobs).run)
    state = run.read_state()
    assert state.status is RunStatus.CRASHED and state.failure is not None
    assert state.failure.kind == "resume-unknown"
    assert "step 600 (ckpt.pt) does not exist" in state.failure.evidence, state.failure.evidence
    assert jobs.entrypoints == [] and len(jobs.readers) == 1, "the reader ran; no trainer was submitted"


class SlowReader(Jobs):
    """A reader that never finishes; the person asks to stop while it runs."""

    def __init__(self, run: RunDir) -> None:
        super().__init__([RUNNING, SUCCEEDED])
        self.run = run

    def submit(self, payload: dict[str, Any]) -> str:
        if VERIFIES in payload["metadata"]:
            self.readers[payload["submission_id"]] = ""
            return str(payload["submission_id"])
        return super().submit(payload)

    def info(self, submission_id: str) -> dict[str, Any]:
        if submission_id in self.readers:
            self.run.stop_request_path.write_text('{"at": 1.0}')  # the person's stop, mid-read
            return RUNNING
        return super().info(submission_id)


def test_a_stop_request_while_the_cluster_reads_the_checkpoints_stops_the_reader_and_the_run(
    folder: StateFolder, tmp_path: Path
) -> None:
    run = make_run(
        folder, tmp_path, resume_args=RESUME, resumed_from_step=600, job_checkpoint=_checkpoint(600),
        max_restarts=3, backoff_seconds=0.0,
    )  # fmt: skip
    jobs = SlowReader(run)
    follow_to_the_end(cluster_agent(run, jobs).run)
    state = run.read_state()
    assert state.status is RunStatus.STOPPED and state.failure is None, state
    assert jobs.stopped == list(jobs.readers), "the reader was asked to stop"
    assert jobs.entrypoints == [], "no trainer was submitted"
