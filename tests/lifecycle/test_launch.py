"""The agent's entry point starts the trainer before loading the agent, then hands it over.

Real processes: ``python -m arena_ls.agent.launch RUN_DIR`` as a server
starts it, on a run folder written as a server writes it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from arena_ls.agent.trainer_start import launch_from_spec
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.rundir import RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder

FAKE_TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "fake_trainer.py"


def write_run(root: Path, argv: list[str], **extra: object) -> Path:
    def build(run_id: str) -> RunSpec:
        spec = RunSpec(run_id=run_id, job_id="job", job_name="Job", kind="train", argv=argv, cwd=str(root))
        for name, value in extra.items():
            setattr(spec, name, value)
        return spec

    return RunLock(StateFolder(root / ".aide" / "training")).claim("job", build).path


def run_agent(run_dir: Path) -> dict[str, object]:
    """Run the agent to the end, as a server starts it; its final state."""
    subprocess.run([sys.executable, "-m", "arena_ls.agent.launch", str(run_dir)], check=True, timeout=120)
    state: dict[str, object] = json.loads((run_dir / "state.json").read_text())
    return state


def test_the_trainer_started_early_is_the_one_the_agent_records(tmp_path: Path) -> None:
    run_dir = write_run(
        tmp_path,
        [sys.executable, str(FAKE_TRAINER), "--steps", "3", "--print-env"],
        resume_args=["--resume", "--start-step", "{step}"],
        resumed_from_step=7,
    )
    state = run_agent(run_dir)
    assert state["status"] == "succeeded"
    assert state["argv"] == [
        sys.executable,
        str(FAKE_TRAINER),
        "--steps",
        "3",
        "--print-env",
        "--resume",
        "--start-step",
        "7",
    ]
    texts = [line.text for line in iter_all_lines(run_dir)]
    assert texts[0].startswith("starting job: "), "the agent's own line comes before the trainer's"
    assert f"ARENA_STOP_FILE={run_dir / 'STOP'}" in texts
    assert "PYTHONUNBUFFERED=1" in texts


def test_a_trainer_that_cannot_start_is_a_crash_with_the_reason(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-program")
    run_dir = write_run(tmp_path, [missing, "--steps", "3"])
    state = run_agent(run_dir)
    assert state["status"] == "crashed"
    failure = state["failure"]
    assert isinstance(failure, dict) and failure["kind"] == "error"
    assert f"could not start {missing!r}" in str(failure["evidence"])
    assert not (tmp_path / ".aide" / "training" / "active.lock").exists()


def test_an_unreadable_spec_starts_nothing_early(tmp_path: Path) -> None:
    (tmp_path / "spec.json").write_text("{not json")
    assert launch_from_spec(tmp_path) is None
    (tmp_path / "spec.json").write_text(json.dumps({"argv": "not a list of args"}))
    assert launch_from_spec(tmp_path) is None


def test_launch_starts_the_spec_trainer_with_the_contract_environment(tmp_path: Path) -> None:
    """The launch's pumps own the trainer's pipes: what it printed is read from the run's log.

    Reading the pipe here as well (``communicate()``) would race the pumps for
    the same bytes; the log is the one place every line ends up.
    """
    run_dir = write_run(tmp_path, [sys.executable, str(FAKE_TRAINER), "--steps", "0", "--print-env"])
    early = launch_from_spec(run_dir)
    assert early is not None and early.error is None and early.process is not None
    early.start_capture()  # as ``launch.main`` does once the run is recorded
    assert early.process.wait(timeout=60) == 0
    for pump in early.pumps:
        pump.join(timeout=60)
    early.writer.close()
    printed = [line.text for line in iter_all_lines(run_dir) if line.stream == "stdout"]
    assert f"ARENA_RUN_ID={run_dir.name}" in printed and "ARENA_JOB_ID=job" in printed
    assert f"ARENA_STOP_FILE={run_dir / 'STOP'}" in printed


def test_the_agent_reads_its_spec_where_the_folder_went_while_it_loaded(tmp_path: Path) -> None:
    """``launch`` opens the run folder before the trainer starts; a workspace moved before the
    agent read its spec (a second under load) is followed, not a run lost three seconds in."""
    import pytest

    from arena_ls import platform
    from arena_ls.agent.local.agent import read_spec_following
    from arena_ls.run.rundir import RunDir

    def spec(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="quick", job_name="quick", kind="task", argv=["python", "t.py"],
                       cwd=str(tmp_path), created_at=0.0)  # fmt: skip

    run = RunLock(StateFolder(tmp_path / "ws" / ".aide" / "training")).claim("quick", spec)
    handle = platform.open_folder(run.path)  # as launch opens it
    (tmp_path / "ws").rename(tmp_path / "moved")
    moved = RunDir(run.path)
    assert read_spec_following(moved, handle).run_id == run.run_id
    assert moved.path == tmp_path / "moved" / ".aide" / "training" / "runs" / run.run_id
    with pytest.raises(FileNotFoundError):  # not opened early: the old path is all it knows
        read_spec_following(RunDir(run.path), -1)
