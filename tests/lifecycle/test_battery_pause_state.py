"""A run stopped for battery is recorded ``restarting`` with what it waits for, in one write.

Contract 7.3: while a pre-flight check fails the run stays ``restarting`` and its RunInfo has
``waitingFor``. The agent recorded ``restarting`` first and ``waitingFor`` in a later write, so a
status read in between (a loaded machine's, CI's) showed a relaunch that looked imminent
(``tests/lsp/test_power_during_a_run.py`` failed that way). The real ``StopProtocol`` here, with a
real run folder, a fake power reading and the state's writes recorded as they are asked for.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.local.stop import StopProtocol
from arena_ls.agent.relaunch_gate import GateRules, MachineReading
from arena_ls.run.rundir import CheckpointRecord, RunState
from arena_ls.run.states import RunStatus
from tests.helpers.runs import claim_run


class FakePower:
    """On battery until ``plug_in``; the agent's gate rules ask for power."""

    def __init__(self) -> None:
        self.plugged_in = False

    def gate_rules(self, *, need_power: bool = False) -> GateRules:
        return GateRules(require_plugged_in=True, min_free_ram_mb=0)

    def reading(self) -> MachineReading:
        return MachineReading(plugged_in=self.plugged_in, available_ram_mb=None)


class PausedStop(StopProtocol):
    """The stop protocol of a local trainer stopped for battery, with what ``resume_on_ac`` uses."""

    def __init__(self, tmp_path: Path) -> None:
        run_dir = claim_run(tmp_path, "lm", resume_args=["--resume", "--start-step", "{step}"])
        spec = run_dir.read_spec()
        self.state = RunState(run_id=spec.run_id, job_id="lm", status=RunStatus.STOPPING)
        self.state.last_checkpoint = CheckpointRecord(step=40, path="ckpt.pt", at=time.time(), run_id="x")
        self.lock = threading.RLock()
        self.writes: list[tuple[RunStatus, Any]] = []
        """What each asked-for write of ``state.json`` would hold, at the moment it is asked for."""
        record = RunRecord(spec, self.state, self.lock, lambda event: None, self._written)
        super().__init__(
            record,
            run_dir,
            power=FakePower(),  # type: ignore[arg-type]
            stall_watch=None,  # type: ignore[arg-type]  # no stall is judged here
            spikes=SimpleNamespace(spike_pending=None),
            verify=lambda ordered: None,  # type: ignore[arg-type,return-value]
            between_waits=lambda: None,
            told_stop_file=str(run_dir.stop_file),
        )

    def _written(self) -> None:
        with self.lock:
            self.writes.append((self.state.status, self.state.waiting_for))

    def pause(self, seconds: float) -> None:
        self.power.plugged_in = True  # type: ignore[attr-defined]  # power returns while it waits


def test_the_battery_pause_is_recorded_restarting_with_what_it_waits_for(tmp_path: Path) -> None:
    trainer = PausedStop(tmp_path)
    resumes, step = trainer.resume_on_ac()
    assert (resumes, step) == (True, 40)
    restarting = [waiting for status, waiting in trainer.writes if status is RunStatus.RESTARTING]
    assert restarting, "the pause was recorded"
    assert [check["name"] for check in restarting[0] or []] == ["power"], trainer.writes
    assert restarting[-1] is None  # power came back: nothing is waited for any more
