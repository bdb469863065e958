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
        {RunStatus.STOPPED, RunStatus.SUCCEEDED, RunStatus.CRASHED, RunStatus.LOST}
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


def passed_through(before: RunStatus | None, after: RunStatus) -> list[RunStatus]:
    """The statuses a run went through between two readings of its state (the shortest legal way).

    A reader polls ``state.json``, so a quick stop (``running``, ``stopping``,
    ``stopped`` within one poll) can look like ``running -> stopped``, which
    is not a legal move. The contract announces every status change; these
    are the ones in between. Empty when the move is legal, unknown, or none.
    """
    if before is None or before == after or after in LEGAL_MOVES[before]:
        return []
    routes: dict[RunStatus, list[RunStatus]] = {before: []}
    queue = collections.deque([before])
    while queue:
        current = queue.popleft()
        for target in sorted(LEGAL_MOVES[current], key=list(RunStatus).index):
            if target not in routes:
                routes[target] = [*routes[current], target]
                queue.append(target)
    route = routes.get(after)
    return route[:-1] if route else []
