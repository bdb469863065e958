"""The run lifecycle as an explicit state machine.

One enum, one table of legal moves, one transition function that rejects
illegal moves and logs each one. The state diagram in ``docs/architecture.md``
is drawn from ``LEGAL_MOVES``.
"""

from __future__ import annotations

import collections
import enum
import logging

log = logging.getLogger(__name__)


class RunStatus(str, enum.Enum):
    """The contract's run statuses."""

    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SUCCEEDED = "succeeded"
    RESTARTING = "restarting"
    CRASHED = "crashed"
    LOST = "lost"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset({RunStatus.STOPPED, RunStatus.SUCCEEDED, RunStatus.CRASHED, RunStatus.LOST})

LEGAL_MOVES: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.STARTING: frozenset({RunStatus.RUNNING, RunStatus.CRASHED, RunStatus.STOPPED, RunStatus.LOST}),
    RunStatus.RUNNING: frozenset(
        {
            RunStatus.STOPPING,
            RunStatus.SUCCEEDED,
            RunStatus.RESTARTING,
            RunStatus.CRASHED,
            RunStatus.LOST,
        }
    ),
    RunStatus.STOPPING: frozenset(
        # RESTARTING: stopped for battery, the run waits for power to resume (contract 7.3)
        {RunStatus.STOPPED, RunStatus.SUCCEEDED, RunStatus.CRASHED, RunStatus.LOST, RunStatus.RESTARTING}
    ),
    RunStatus.RESTARTING: frozenset(
        {RunStatus.RUNNING, RunStatus.STOPPED, RunStatus.CRASHED, RunStatus.LOST}
    ),
    RunStatus.STOPPED: frozenset(),
    RunStatus.SUCCEEDED: frozenset(),
    RunStatus.CRASHED: frozenset(),
    RunStatus.LOST: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A move the lifecycle does not allow (a bug in the caller)."""


def transition(run_id: str, current: RunStatus, target: RunStatus) -> RunStatus:
    """Check that ``current -> target`` is legal, log it, and return ``target``."""
    if target not in LEGAL_MOVES[current]:
        raise IllegalTransition(f"run {run_id}: {current.value} -> {target.value} is not allowed")
    log.info("run %s: %s -> %s", run_id, current.value, target.value)
    return target


MOST_RELAUNCHES_FILLED = 20
"""The most relaunches ``passed_through`` fills in between two readings (a server that slept long)."""


def passed_through(
    before: RunStatus | None, after: RunStatus, relaunches: int = 0, through: RunStatus | None = None
) -> list[RunStatus]:
    """The statuses a run went through between two readings of its state (the shortest legal way).

    A reader polls ``state.json``, so a quick stop (``running``, ``stopping``,
    ``stopped`` within one poll) can look like ``running -> stopped``, which
    is not a legal move. And a quick relaunch can look like no move at all:
    ``running``, then ``running`` again with ``restarts`` one higher, the
    ``restarting`` in between missed. The contract announces every status
    change; these are the ones in between: the shortest legal route from
    ``before`` to ``after`` that enters ``restarting`` exactly ``relaunches``
    times (the rise of ``restarts``, which the agent counts on entering
    ``restarting``; at most ``MOST_RELAUNCHES_FILLED``). Empty when the move
    is legal and no relaunch was missed, when ``before`` is unknown, or when
    no legal route exists.

    ``through``: a status the run is known to have entered on the way (its
    state says so: a ``restarting`` run that records ``stoppedBy`` was
    stopped, ``stopping`` first, for the battery); a route between two
    different statuses then passes it (the same status read again invents
    nothing).
    """
    if before is None:
        return []
    if through is not None and before is not after and through not in (before, after):
        first = passed_through(before, through)
        if through in LEGAL_MOVES[before] or first:
            return [*first, through, *passed_through(through, after, relaunches)]
    wanted = min(max(relaunches, 0), MOST_RELAUNCHES_FILLED)
    if after is RunStatus.RESTARTING and before is not RunStatus.RESTARTING:
        wanted = max(wanted, 1)  # reaching it enters it (a count that did not rise is not believed)
    start, goal = (before, 0), (after, wanted)
    routes: dict[tuple[RunStatus, int], list[RunStatus]] = {start: []}
    queue = collections.deque([start])
    while queue and goal not in routes:
        current, entered = queue.popleft()
        for target in sorted(LEGAL_MOVES[current], key=list(RunStatus).index):
            step = (target, entered + (target is RunStatus.RESTARTING))
            if step[1] <= wanted and step not in routes:
                routes[step] = [*routes[(current, entered)], target]
                queue.append(step)
    route = routes.get(goal)
    return route[:-1] if route else []


def stop_on_the_way(after: RunStatus, stopped_by: str | None) -> RunStatus | None:
    """``STOPPING`` where a state shows the run was stopped on its way to ``after``: a ``restarting``
    run that records ``stoppedBy`` (stopped for the battery, waiting for power; contract 7.3). Its
    ``stopping`` can last a few milliseconds, and a reader of ``state.json`` may never see it."""
    return RunStatus.STOPPING if after is RunStatus.RESTARTING and stopped_by else None
