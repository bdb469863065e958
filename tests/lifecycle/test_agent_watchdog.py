"""The agent carries out the watchdog's decisions: its attempts faked, no trainer started."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arena_ls.agent.local.agent import Agent
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.rundir import CheckpointRecord, RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus


def make_agent(tmp_path: Path, **spec: Any) -> Agent:
    folder = StateFolder(tmp_path / "state")

    def build(run_id: str) -> RunSpec:
        fields: dict[str, Any] = {"kind": "train", "resume_args": ["--resume", "{step}"], **spec}
        return RunSpec(
            run_id=run_id, job_id="job", job_name="Job", argv=["train"], cwd=str(tmp_path), **fields
        )

    return Agent(RunDir(RunLock(folder).claim("job", build).path))


class Crashes:
    """Stands in for ``LocalTrainer._attempt``: each attempt runs, announces a checkpoint, and crashes."""

    def __init__(self, agent: Agent, checkpoints: list[int | None]) -> None:
        self.agent = agent
        self.checkpoints = iter(checkpoints)
        self.started_from: list[int | None] = []

    def __call__(self, step: int | None, path: str | None = None, skip: int = 0) -> RunStatus | None:
        self.started_from.append(step)
        self.agent.record.move(RunStatus.RUNNING)
        checkpoint = next(self.checkpoints)
        announced = checkpoint is not None  # a trainer that saved said so
        self.agent.trainer.announcements.attempt_announced = announced
        if checkpoint is not None:
            self.agent.state.last_checkpoint = CheckpointRecord(step=checkpoint, path="ckpt.pt", at=0.0)
        return None  # crashed: the watchdog decides


def arena_lines(agent: Agent) -> list[str]:
    return [line.text for line in iter_all_lines(agent.run_dir.path) if line.stream == "arena"]


def test_the_agent_relaunches_from_each_checkpoint_until_a_crash_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path, max_restarts=3, backoff_seconds=0.0)
    crashes = Crashes(agent, [100, 200, 200])
    monkeypatch.setattr(agent.trainer, "_attempt", crashes)
    assert agent.run() == 0
    assert crashes.started_from == [None, 100, 200]
    state = agent.run_dir.read_state()
    assert state.status is RunStatus.CRASHED
    assert state.restarts == 2
    assert state.failure is not None and state.failure.kind == "crash-loop"
    assert state.failure.evidence.startswith("crashed again at step 200 after a relaunch from it")
    lines = arena_lines(agent)
    assert "restarting from step 100 (attempt 1/3) in 0s" in lines
    assert "restarting from step 200 (attempt 1/3) in 0s" in lines, "progress restored the budget"
    assert lines[-1] == "run ended: crashed"
    assert RunLock(StateFolder(tmp_path / "state")).holder() is None


def test_a_spent_budget_ends_the_run_crashed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent(tmp_path, max_restarts=1, backoff_seconds=0.0)
    crashes = Crashes(agent, [None, 5, 4])
    monkeypatch.setattr(agent.trainer, "_attempt", crashes)
    agent.run()
    assert crashes.started_from == [None, None, 5]
    state = agent.run_dir.read_state()
    assert (state.status, state.restarts, state.failure) == (RunStatus.CRASHED, 2, None)


def test_a_task_is_not_relaunched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent(tmp_path, kind="task", max_restarts=3, backoff_seconds=0.0)
    crashes = Crashes(agent, [100])
    monkeypatch.setattr(agent.trainer, "_attempt", crashes)
    agent.run()
    assert crashes.started_from == [None]
    state = agent.run_dir.read_state()
    assert (state.status, state.restarts) == (RunStatus.CRASHED, 0)
    assert not any(line.startswith("restarting") for line in arena_lines(agent))


def test_a_stop_requested_during_the_backoff_ends_the_run_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path, max_restarts=3, backoff_seconds=600.0)
    crashes = Crashes(agent, [100])
    monkeypatch.setattr(agent.trainer, "_attempt", crashes)
    agent.run_dir.request_stop(kill=False, grace_seconds=None, by="a test")
    agent.run()
    assert crashes.started_from == [None]
    state = agent.run_dir.read_state()
    assert (state.status, state.stopped_by, state.restarts) == (RunStatus.STOPPED, None, 1)
    assert "stop requested during the backoff: relaunch cancelled" in arena_lines(agent)
