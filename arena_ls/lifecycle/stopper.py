"""A stop of a run (contract 7.1), for the supervisor: 1007 before a stop that loses work (no
checkpoint announced, or the last one too old), the request through the run's back end (its agent
carries it out and records the outcome), and the wait for the final status or the back end's
refusal. ``Stopper`` reaches the supervisor only through ``StopSurroundings``.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Protocol

import attrs

from arena_ls.errors import (
    NO_CHECKPOINT,
    ArenaError,
)
from arena_ls.lifecycle.checkpoint_age import describe, stale_checkpoint_refusal
from arena_ls.lifecycle.follower import RunFollower
from arena_ls.lifecycle.runview import RunView
from arena_ls.run.states import RunStatus

log = logging.getLogger(__name__)

STOP_ANSWER_MARGIN = 30.0
"""``arena/stop`` waits for the final status at most the grace window and this much more, then
answers the run as it stands (an agent that cannot reach its cluster keeps asking it to stop)."""


@attrs.define
class StopRequest:
    id: str | None = None
    run_id: str | None = None
    kill: bool = False
    confirm: bool = False
    grace_seconds: float | None = None
    wait: bool = True


class StopSurroundings(Protocol):
    """What a stop uses of the supervisor: its runs and the follower of their files."""

    follower: RunFollower

    def scan(self, *, list_folder: bool = True) -> None: ...

    def wake(self) -> None: ...

    def active_view(self) -> RunView | None: ...

    def view_for(self, run_id: str) -> RunView: ...


class Stopper:
    """A stop of a run (``Supervisor.stop``): the questions before lost work (1007), the request
    through the run's back end, and the wait for its final status."""

    def __init__(self, runs: StopSurroundings) -> None:
        self.runs = runs

    def _target(self, request: StopRequest) -> RunView | None:
        if request.run_id:
            return self.runs.view_for(request.run_id)
        self.runs.scan()
        active = self.runs.active_view()
        if request.id is not None:
            if active is not None and active.spec.job_id == request.id:
                return active
            return None
        return active

    async def stop(self, request: StopRequest) -> RunView | None:
        """Stop a run; the run asked for (None: nothing was stopped, the workspace is idle)."""
        view = self._target(request)
        if view is not None:
            view.refresh_state()  # another server may have just stopped it
        if view is None or view.is_final:
            return view if view is not None and request.run_id else None
        if view.spec.kind == "train" and not request.confirm and not self._announced_checkpoint(view):
            state = view.state
            started = state.started_at if state and state.started_at else view.spec.created_at
            runtime = round(max(0.0, time.time() - started), 1)
            raise ArenaError(
                NO_CHECKPOINT,
                f"run {view.run_id} has announced no checkpoint: stopping it loses "
                f"{runtime:.0f}s of training; pass confirm: true to stop anyway",
                runtimeSeconds=runtime,
            )
        if view.spec.kind == "train" and not request.confirm:
            self._refuse_if_checkpoint_old(view)
        by = f"arena-ls pid {os.getpid()}"
        view.backend.request_stop(view.run_dir, kill=request.kill, grace_seconds=request.grace_seconds, by=by)
        self.runs.wake()
        if not request.wait:
            return view
        grace = request.grace_seconds if request.grace_seconds is not None else view.spec.grace_seconds
        await self._wait_stopped(view, grace + STOP_ANSWER_MARGIN)
        view.read_new_lines(notify=False)
        return view

    async def _wait_stopped(self, view: RunView, timeout: float) -> None:
        """Wait for a stopped run to end, or for its back end to say the stop could not be passed
        on (a cluster's head unreachable): then its refusal at once (the agent keeps asking, and
        follows the run until the stop is delivered or the run is ``lost``)."""

        def undelivered(v: RunView) -> ArenaError | None:
            return v.backend.stop_undelivered(v.spec, v.state)

        if await self.runs.follower.until(view, lambda v: v.is_final or undelivered(v) is not None, timeout):
            self.runs.follower.follow(view, check_liveness=False)  # its last lines and status, told now
        refusal = undelivered(view)
        if refusal is not None and not view.is_final:
            raise refusal

    def _refuse_if_checkpoint_old(self, view: RunView) -> None:
        """1007 for a running trainer whose last checkpoint is too old (``checkpoint_age``)."""
        if view.status is not RunStatus.RUNNING:
            return
        self.runs.follower.follow(view, check_liveness=False)  # the lines up to now, as the poll reads them
        view.read_announcements_of_lines()
        checkpoints = list(view.recent_checkpoints)
        recorded = view.state.last_checkpoint if view.state is not None else None
        if recorded is not None and (not checkpoints or checkpoints[-1][0] != recorded.step):
            checkpoints = [(recorded.step, recorded.at)]  # announced before this view read the log
        step = (
            view.progress.step
            if view.progress.step is not None
            else (view.state.step if view.state else None)
        )
        path = (
            recorded.path
            if recorded is not None
            else (view.seen_checkpoint.path if view.seen_checkpoint else None)
        )
        data = stale_checkpoint_refusal(time.time(), checkpoints, path, step)
        if data is not None:
            raise ArenaError(NO_CHECKPOINT, f"run {view.run_id}: {describe(data)}", **data)

    def _announced_checkpoint(self, view: RunView) -> bool:
        """Has the run's trainer announced a checkpoint? Recorded in the state, or in its log.

        The log counts too: the trainer starts before its agent has loaded, and
        a checkpoint it announces meanwhile reaches the state only once the
        agent has; a client that saw the line must not be told there is none.
        """
        if view.state is not None and view.state.last_checkpoint is not None:
            return True
        self.runs.follower.follow(view, check_liveness=False)  # the lines up to now, as the poll reads them
        view.read_announcements_of_lines()
        return view.seen_checkpoint is not None or (
            view.state is not None and view.state.last_checkpoint is not None
        )
