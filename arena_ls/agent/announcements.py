"""What a trainer's announcement changes in its run, the same for every back end (contract 3).

The local trainer (``agent/local/output.py``) and the cluster's log copy (``cluster/ray_logs.py``)
both hand each parsed ``Checkpoint`` and ``Progress`` here, under their run's lock: the run's
record of checkpoints (what a resume may fall back to, contract 8.2), its step, total and loss,
and the evidence of a bad loss. What each back end does beyond that (the stall watch, the spike
watch, how often the state is written) stays with it.
"""

from __future__ import annotations

import time

from arena_ls.agent.attempts import RunRecord
from arena_ls.run.events import Checkpoint, Progress, is_bad_loss
from arena_ls.run.rundir import CheckpointRecord, RunState


def apply_checkpoint(event: Checkpoint, run_id: str, record: RunRecord, state: RunState) -> CheckpointRecord:
    """The announced checkpoint joins the run's record (its last, and one to fall back to); the
    state's step is at least its step. The caller holds the run's lock, then asks its state writer
    to record the job's checkpoint with the record returned."""
    announced = CheckpointRecord(
        step=event.step,
        path=event.path,
        at=time.time(),
        run_id=run_id,
        bytes=event.bytes,
        sha256=event.sha256,
    )
    record.add_checkpoint(announced)
    state.step = max(state.step or 0, event.step)
    return announced


def apply_progress(event: Progress, record: RunRecord, state: RunState, known_bad: str | None) -> str | None:
    """The announced step, total and loss go into the state (a relaunch's downtime ends at the
    first progress after it); returns the bad-loss evidence, ``known_bad`` once there is one (the
    first NaN or inf is the evidence, said once). The caller holds the run's lock."""
    record.progressed(time.time())
    state.step = event.step
    state.total_steps = event.total or state.total_steps
    state.loss = event.loss
    if known_bad is None and is_bad_loss(event.loss):
        return f"loss is {event.loss} at step {event.step}"
    return known_bad
