"""What a stop (or a kill) lost: the work done after the last checkpoint (contract 7.1).

``RunInfo.lost`` is ``{steps, seconds}`` for a run that was stopped or killed
by a signal, null for any other run and where it cannot be known (a trainer
that never announced a step). A pure function of the recorded state:

- ``steps``: the step reached minus the last checkpoint's step (the step the
  run started from when it announced none; 0 when it started from scratch),
  never below 0: 0 when the stop saved a checkpoint at the step reached;
- ``seconds``: from that checkpoint (or the run's start, when later, or when
  there is none) to the end, 0 when no step was lost. The end is when the
  trainer ended, so time spent waiting out the stop is counted too: an upper
  bound of the training time lost.
"""

from __future__ import annotations

import attrs

from arena_ls.run.rundir import RunState
from arena_ls.run.states import RunStatus


@attrs.frozen
class LostWork:
    steps: int
    seconds: float


def lost_work(state: RunState, resumed_from_step: int | None, step: int | None = None) -> LostWork | None:
    """The work ``state``'s stop or kill lost, or None (not stopped nor killed, or unknowable).

    ``step``: the step reached as the caller says it beside ``lost`` (``RunInfo.step``: for an
    ended run, the record's too); the record's step when not given."""
    if not applies(state):
        return None
    checkpoint = state.last_checkpoint
    saved_step = checkpoint.step if checkpoint is not None else (resumed_from_step or 0)
    announced = step if step is not None else state.step
    reached = max(s for s in (announced, saved_step) if s is not None)
    if announced is None and checkpoint is None:
        return None  # no step was ever announced: what it did is unknown
    steps = max(0, reached - saved_step)
    if steps == 0:
        return LostWork(0, 0.0)
    since = [t for t in (state.started_at, checkpoint.at if checkpoint else None) if t is not None]
    if not since or state.ended_at is None:
        return LostWork(steps, 0.0)
    return LostWork(steps, round(max(0.0, state.ended_at - max(since)), 1))


def applies(state: RunState) -> bool:
    """A run stopped by ``arena/stop``, or ended by a signal (``kill -9``, the OOM killer)."""
    if state.status is RunStatus.STOPPED:
        return True
    return state.status.is_final and state.signal is not None
