"""The start path's pieces: the one resume argv, the launcher's first record, the fast path's imports."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from arena_ls.agent import trainer_start
from arena_ls.agent.trainer_start import (
    EarlyLaunch,
    launch_from_spec,
    record_launch,
    trainer_argv,
)
from arena_ls.run.capture import OutputReader
from arena_ls.run.rundir import CheckpointRecord, RunDir, RunSpec, RunState, unstructure
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

RESUME = ["--resume", "--start-step", "{step}"]
QUICK = [sys.executable, "-c", "pass"]


# --------------------------------------------------------------------------- the resume argv


def test_a_fresh_start_runs_the_job_args_alone() -> None:
    job = ["python", "train.py", "--lr", "3e-4"]
    argv = trainer_argv(job, RESUME, None)
    assert argv == job and argv is not job, "a copy: the caller's list is never shared"


def test_a_resume_appends_the_resume_args_with_the_step() -> None:
    argv = trainer_argv(["python", "train.py"], RESUME, 1200)
    assert argv == ["python", "train.py", "--resume", "--start-step", "1200"]


def test_every_step_placeholder_is_replaced_inside_its_argument() -> None:
    argv = trainer_argv(["t"], ["--from=ckpt/step_{step}.pt", "--tag", "{step}-{step}"], 0)
    assert argv == ["t", "--from=ckpt/step_0.pt", "--tag", "0-0"]


def test_a_job_without_resume_args_never_gets_a_step() -> None:
    assert trainer_argv(["python", "train.py"], [], 7) == ["python", "train.py"]


# --------------------------------------------------------------------------- the launcher's record


def claim_run(root: Path, argv: list[str], **extra: object) -> RunDir:
    def build(run_id: str) -> RunSpec:
        spec = RunSpec(run_id=run_id, job_id="job", job_name="Job", kind="train", argv=argv, cwd=str(root))
        return attrs.evolve(spec, **extra)

    return RunLock(StateFolder(root / "state")).claim("job", build)


def finish(early: EarlyLaunch) -> None:
    """As ``launch.main`` ends the launcher's part: the capture started (after the record), then
    the trainer and its pumps waited for."""
    assert early.process is not None
    early.start_capture()
    early.process.wait(timeout=60)
    for pump in early.pumps:
        pump.join(timeout=60)
    early.writer.close()


def test_the_record_is_the_running_state_the_agent_reads(tmp_path: Path) -> None:
    run = claim_run(tmp_path, QUICK)
    early = launch_from_spec(run.path)
    assert early is not None and early.process is not None
    record_launch(run.path, early)
    finish(early)
    assert early.generation == 1
    state = run.read_state()
    assert state.status is RunStatus.RUNNING
    assert (state.run_id, state.job_id, state.generation) == (run.run_id, "job", 1)
    assert state.pid == early.process.pid and state.pid_create_time is not None
    assert state.agent_pid == os.getpid() and state.agent_create_time is not None
    assert state.argv == QUICK and state.started_at == early.started_at
    written = json.loads(run.state_path.read_text())
    assert set(written) <= set(unstructure(RunState(run_id="r", job_id="j"))), "RunState's own names"


PRINTS = [sys.executable, "-c", "for i in range(50): print('line', i, 'x' * 1000, flush=True)"]
"""A trainer that prints 50 KB at once, then exits (the pipe holds it: ``platform.TRAINER_PIPE_BYTES``)."""


def _trainer_lines(run: RunDir) -> list[str]:
    reader = OutputReader(run.path)
    return [line.text for line in reader.read(reader.start(), 1000).lines if line.stream == "stdout"]


def test_the_trainers_output_is_copied_only_once_the_run_is_recorded(tmp_path: Path) -> None:
    """A trainer flooding from its first instant, the state folder's disk nearly full: were its lines
    copied before the launcher wrote ``state.json``, they could take the room of the run's record,
    and its printing would fail its run (seen in CI: the start answered "the job agent exited with
    code 1 before recording the run"). The pipe holds them until the record is written."""
    run = claim_run(tmp_path, PRINTS)
    early = launch_from_spec(run.path)
    assert early is not None and early.process is not None
    assert early.process.wait(timeout=60) == 0, "the whole output fits the pipe"
    assert early.pumps == [] and _trainer_lines(run) == [], "nothing copied before the record"
    record_launch(run.path, early)
    assert run.read_state().status is RunStatus.RUNNING
    finish(early)
    lines = _trainer_lines(run)
    assert len(lines) == 50 and lines[0].startswith("line 0 ") and lines[-1].startswith("line 49 ")


def test_a_start_that_resumes_is_left_to_the_agent_which_verifies_its_checkpoint_first(
    tmp_path: Path,
) -> None:
    """Contract 8.2: no trainer resumes before its checkpoint is verified; the early launch (before
    the agent loaded) would start it at once, so a start that resumes is the agent's to launch."""
    folder = StateFolder(tmp_path / "state")
    folder.ensure()
    folder.record_job_checkpoint("job", CheckpointRecord(step=40, path="ckpt-40.pt", at=1234.5))
    run = claim_run(tmp_path, QUICK, resume_args=["--start-step", "{step}"], resumed_from_step=40)
    assert launch_from_spec(run.path) is None
    assert not run.state_path.exists(), "nothing started, nothing recorded"
    plain = claim_run(tmp_path / "plain", QUICK, resumed_from_step=40)  # no resume.args: not a resume
    early = launch_from_spec(plain.path)
    assert early is not None and early.process is not None
    finish(early)


def test_a_checkpoint_of_another_step_is_not_the_one_resumed_from(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "job.json").write_text(json.dumps({"step": 41, "path": "p", "at": 1.0}))
    assert trainer_start.resumed_checkpoint(tmp_path, "job", 40) is None
    (tmp_path / "jobs" / "job.json").write_text("{damaged")
    assert trainer_start.resumed_checkpoint(tmp_path, "job", 41) is None
    assert trainer_start.resumed_checkpoint(tmp_path, "job", None) is None


def test_a_trainer_that_did_not_start_is_not_recorded(tmp_path: Path) -> None:
    run = claim_run(tmp_path, [str(tmp_path / "no-such-program")])
    early = launch_from_spec(run.path)
    assert early is not None and early.error is not None
    record_launch(run.path, early)
    early.writer.close()
    assert early.generation == 0 and not run.state_path.exists(), "the agent records the failure"


def test_a_failed_write_leaves_the_first_record_to_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path, payload: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(trainer_start, "write_json_atomic", full)
    run = claim_run(tmp_path, QUICK)
    early = launch_from_spec(run.path)
    assert early is not None
    record_launch(run.path, early)
    finish(early)
    assert early.generation == 0 and not run.state_path.exists()


def test_an_existing_state_is_never_replaced(tmp_path: Path) -> None:
    run = claim_run(tmp_path, QUICK)
    run.write_state(RunState(run_id=run.run_id, job_id="job", status=RunStatus.CRASHED))
    early = launch_from_spec(run.path)
    assert early is not None
    record_launch(run.path, early)
    finish(early)
    assert early.generation == 0 and run.read_state().status is RunStatus.CRASHED


# --------------------------------------------------------------------------- the fast path

FAST_PATH = """
import sys
from pathlib import Path
from arena_ls.agent import launch
from arena_ls.agent.trainer_start import launch_from_spec
early = launch_from_spec(Path(sys.argv[1]))
heavy = sorted(m for m in ("attrs", "cattrs", "psutil", "arena_ls.agent.local.agent") if m in sys.modules)
print(f"started={early is not None and early.process is not None} loaded={heavy}")
early.start_capture()
early.process.wait()
for pump in early.pumps:
    pump.join(60)
early.writer.close()
"""


def test_the_trainer_starts_before_attrs_cattrs_and_psutil_load(tmp_path: Path) -> None:
    """The entry point and the start module load none of the agent's heavy imports."""
    run = claim_run(tmp_path, QUICK)
    result = subprocess.run(
        [sys.executable, "-c", FAST_PATH, str(run.path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert (result.returncode, result.stdout.strip()) == (0, "started=True loaded=[]"), result.stderr


# --------------------------------------------------------------------------- stops before the agent


def test_a_stop_request_is_read_plainly(tmp_path: Path) -> None:
    assert trainer_start.read_stop_request(tmp_path) is None
    (tmp_path / "stop.json").write_text("")
    assert trainer_start.read_stop_request(tmp_path) == {}, "an empty file (a full disk) still asks"
    (tmp_path / "stop.json").write_text('{"kill": true}')
    assert trainer_start.read_stop_request(tmp_path) == {"kill": True}
    (tmp_path / "stop.json").write_text("{half")
    assert trainer_start.read_stop_request(tmp_path) is None


def test_the_watch_ends_untouched_once_the_agent_took_over(tmp_path: Path) -> None:
    run = claim_run(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"])
    early = launch_from_spec(run.path)
    assert early is not None and early.process is not None
    try:
        assert early.hand_over() is None
        run.request_stop(kill=True, grace_seconds=None, by="test")
        trainer_start.watch_stop(run.path, early).join(timeout=60)
        assert early.process.poll() is None and early.stop_stage is None, "the agent's stop now"
    finally:
        early.process.kill()
        finish(early)


def test_the_watch_begins_a_stop_the_agent_has_not_seen(tmp_path: Path) -> None:
    run = claim_run(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"])
    early = launch_from_spec(run.path)
    assert early is not None and early.process is not None
    try:
        watch = trainer_start.watch_stop(run.path, early)
        run.request_stop(kill=False, grace_seconds=None, by="test")
        watch.join(timeout=60)
        assert early.hand_over() == "file" and run.stop_file.exists()
    finally:
        early.process.kill()
        finish(early)
