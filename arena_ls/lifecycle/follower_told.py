"""What the follower told of each run, and the statuses a run passed through that no reading caught.

The follower reads ``state.json`` by polling, so a quick stop (``running``, ``stopping``,
``stopped`` within one poll) or a quick relaunch (``running``, then ``running`` again with
``restarts`` one higher) can be read as one move or none. The contract announces every status
change: the ones in between are rebuilt here from the run's state (``states.passed_through``,
with the stop a battery pause records, ``states.stop_on_the_way``), so that every listener
forwards the same story, whichever of them announces the run (a change of its state, of its
insights).
"""

from __future__ import annotations

from collections.abc import Callable

from arena_ls.lifecycle.runview import RunView
from arena_ls.run.states import RunStatus, passed_through, stop_on_the_way

ANNOUNCED_KEPT = 256
"""Runs whose last told status is remembered before those no longer followed are forgotten."""

Passed = list[tuple[RunStatus, int]]
"""Statuses a run passed through, oldest first, each with the ``restarts`` counted by then."""


class StatusesTold:
    """The last status and ``restarts`` told of each run (bounded), and what was missed since."""

    def __init__(self, followed: Callable[[str], bool]) -> None:
        self.followed = followed
        """Whether the server still follows a run (one it no longer follows may be forgotten)."""
        self.told: dict[str, tuple[RunStatus, int]] = {}

    def missed_since_told(self, view: RunView) -> Passed:
        """The statuses ``view``'s run passed through since it was last told, which no reading
        caught (a stop, a relaunch); the run's current status is remembered as told."""
        state = view.state
        restarts = state.restarts if state is not None else 0
        before = self.told.get(view.run_id)
        passed: Passed = []
        if before is not None:
            before_status, counted = before
            through = stop_on_the_way(view.status, state.stopped_by if state is not None else None)
            for status in passed_through(before_status, view.status, restarts - counted, through):
                counted += status is RunStatus.RESTARTING
                passed.append((status, counted))
        self.remember(view.run_id, (view.status, restarts))
        return passed

    def remember(self, run_id: str, told: tuple[RunStatus, int]) -> None:
        """Bounded: past ``ANNOUNCED_KEPT`` runs, those no longer followed are forgotten."""
        self.told[run_id] = told
        if len(self.told) > ANNOUNCED_KEPT:
            for known in [run for run in self.told if not self.followed(run)]:
                del self.told[known]
