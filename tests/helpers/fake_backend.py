"""A run back end whose agent is the test itself (``RunBackend``), and a listener that records."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from arena_ls.errors import ArenaError
from arena_ls.lifecycle.backends.base import AgentProcess, RunPlan
from arena_ls.lifecycle.runview import RunView
from arena_ls.manifest import Job, ManifestResult
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.capture import LogLine
from arena_ls.run.rundir import RunDir, RunSpec, RunState
from arena_ls.settings import Settings


@attrs.define
class FakeAgent:
    """An agent process as the server that started it holds it."""

    pid: int
    exit_code: int | None = None

    def poll(self) -> int | None:
        return self.exit_code


@attrs.define
class FakeBackend:
    """A back end whose agent is the test itself."""

    backend_name: str = "fake"
    can_revive: bool = False
    alive: bool = True
    start_error: OSError | None = None
    started: list[RunDir] = attrs.field(factory=list)
    stops: list[dict[str, Any]] = attrs.field(factory=list)
    revived: list[str] = attrs.field(factory=list)
    ended: list[str] = attrs.field(factory=list)
    agents: list[FakeAgent] = attrs.field(factory=list)
    prepared: list[Path] = attrs.field(factory=list)
    released: int = 0
    start_seen: asyncio.Event = attrs.field(factory=asyncio.Event)
    stop_seen: asyncio.Event = attrs.field(factory=asyncio.Event)
    accepts: Callable[[Job], bool] = lambda job: True
    """Which jobs it takes (every one unless a test says otherwise)."""
    asked: list[str] = attrs.field(factory=list)
    """The ids of the jobs the supervisor asked it about (``takes``)."""
    planned: list[tuple[str, ManifestResult]] = attrs.field(factory=list)
    """(job id, the manifest snapshot) of every start it planned."""
    python: tuple[str, ...] | None = None
    """What ``{python}`` means on it (None: the workspace's interpreter)."""

    @property
    def name(self) -> str:
        return self.backend_name

    def takes(self, job: Job) -> bool:
        self.asked.append(job.id)
        return self.accepts(job)

    def plan(self, job: Job, manifest: ManifestResult, settings: Settings) -> RunPlan:
        self.planned.append((job.id, manifest))
        return RunPlan(python=self.python or settings.python)

    @property
    def revivable(self) -> bool:
        return self.can_revive

    def prepare(self, workspace: Path) -> None:
        self.prepared.append(workspace)

    def release(self) -> None:
        self.released += 1

    def start(self, run_dir: RunDir, workspace: Path) -> AgentProcess:
        if self.start_error is not None:
            raise self.start_error
        self.started.append(run_dir)
        agent = FakeAgent(pid=4_000_000 + len(self.started))
        self.agents.append(agent)
        self.start_seen.set()
        return agent

    def start_failed(self, exit_code: int) -> bool:
        return exit_code == 99

    def start_again(self, run_dir: RunDir, workspace: Path, failed: AgentProcess) -> AgentProcess | None:
        return None

    def agent_alive(self, state: RunState | None, process: AgentProcess | None) -> bool:
        if process is not None and process.poll() is None:
            return True
        return self.alive

    def revive(self, run_dir: RunDir, state: RunState) -> AgentProcess | None:
        self.revived.append(run_dir.run_id)
        return FakeAgent(pid=5_000_000)

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        self.ended.append(state.run_id)
        return "the fake trainer was ended"

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        self.stops.append({"run": run_dir.run_id, "kill": kill, "grace": grace_seconds})
        self.stop_seen.set()

    def stop_undelivered(self, spec: RunSpec, state: RunState | None) -> ArenaError | None:
        return None  # the test, as the agent, records how the stop ended

    def trainer_started(self, state: RunState) -> bool:
        return bool(state.pid)

    def local_pids(self, state: RunState) -> list[int]:
        return [state.pid] if state.pid else []


class Recorder:
    """A listener that keeps what it was told."""

    def __init__(self) -> None:
        self.changes: list[tuple[str, str]] = []
        self.lines: list[str] = []
        self.lifecycle_lines: list[str] = []
        self.warnings: list[str] = []

    def run_changed(self, view: RunView) -> None:
        self.changes.append((view.run_id, view.status.value))

    def run_lines(self, view: RunView, lines: list[LogLine]) -> None:
        self.lines.extend(line.text for line in lines)

    def lifecycle(self, view: RunView, event: AgentRecord) -> None:
        self.lifecycle_lines.append(event.render())

    def warning(self, text: str) -> None:
        self.warnings.append(text)


def write_state(run_dir: RunDir, **fields: Any) -> RunState:
    """Write ``state.json`` as a run's agent would."""
    try:
        state = run_dir.read_state()
    except FileNotFoundError:
        spec = run_dir.read_spec()
        state = RunState(run_id=spec.run_id, job_id=spec.job_id)
    for name, value in fields.items():
        setattr(state, name, value)
    run_dir.write_state(state)
    return state
