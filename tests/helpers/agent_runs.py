"""A run under a real job agent, started as a server starts it (``python -m arena_ls.agent.launch``).

For the laptop's tests (contract 8.3): the fake trainer, a power and a notify spec, the agent's environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.rundir import NotifySpec, PowerSpec, RunDir, RunState
from arena_ls.run.states import RunStatus
from tests.helpers.processes import kill_runs_of
from tests.helpers.runs import claim_run
from tests.helpers.waiting import wait_until

TRAINER = Path(__file__).resolve().parents[1] / "fixtures" / "trainers" / "fake_trainer.py"
RESUME = ["--resume", "--start-step", "{step}"]


class AgentRun:
    """One run of the fake trainer (``trainer_args``) under a real agent with ``env`` added."""

    def __init__(
        self,
        root: Path,
        *trainer_args: str,
        env: dict[str, str] | None = None,
        power: PowerSpec | None = None,
        notify: NotifySpec | None = None,
        **spec: Any,
    ) -> None:
        self.root = root
        argv = [sys.executable, str(TRAINER), *trainer_args]
        power = power or PowerSpec(require_plugged_in=False, min_free_ram_mb=0)
        fields: dict[str, Any] = {"resume_args": RESUME, "backoff_seconds": 0.0, **spec}
        notify = notify or NotifySpec(desktop=False)
        self.run_dir: RunDir = claim_run(
            root, "lm", argv=argv, cwd=str(root), power=power, notify=notify, **fields
        )
        with open(root / "agent.log", "ab") as log:
            self.agent = subprocess.Popen(
                [sys.executable, "-m", "arena_ls.agent.launch", str(self.run_dir.path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )

    def state(self) -> RunState | None:
        try:
            return self.run_dir.read_state()
        except (OSError, ValueError):
            return None

    def wait_status(self, *statuses: RunStatus) -> RunState:
        def reached() -> RunState | None:
            state = self.state()
            return state if state is not None and state.status in statuses else None

        return wait_until(reached, f"the run {' or '.join(s.value for s in statuses)}")

    def ended(self) -> RunState:
        state = self.wait_status(RunStatus.SUCCEEDED, RunStatus.CRASHED, RunStatus.STOPPED, RunStatus.LOST)
        self.agent.wait(timeout=60)
        return state

    def arena_lines(self) -> list[str]:
        return [line.text for line in iter_all_lines(self.run_dir.path) if line.stream == "arena"]

    def close(self) -> None:
        if self.agent.poll() is None:
            self.agent.kill()
        self.agent.wait()
        kill_runs_of(self.root)
