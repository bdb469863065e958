"""The watchdog as a pure policy: when is a crashed trainer relaunched, from where, after how long?

Every rule lives in ``Watchdog``:

- only a ``train`` job with ``resume.args`` and ``maxRestarts`` above 0 is
  ever relaunched (a task, or a job that cannot resume, crashes for good);
- a run has a budget of ``maxRestarts`` relaunches; a relaunch after which
  the trainer reached a later checkpoint restores the whole budget;
- the trainer crashing again at the checkpoint it was relaunched from (or,
  relaunched from scratch, again before any checkpoint) is a crash loop:
  no further relaunch;
- the wait before a relaunch doubles with every relaunch of the run,
  ``backoffSeconds * 2 ** (n - 1)``, capped at ``BACKOFF_CAP_SECONDS``.

The watchdog decides; it never reads a clock or touches a process. The
agent asks it after each crash (``after_crash``) and carries out the
``Relaunch`` or ``GiveUp`` it answers; the one timed part, sitting out the
backoff while watching for a stop request, runs against a ``WatchdogHost``
that the agent implements with the real clock and files and the tests with
a fake one.
"""

from __future__ import annotations

import enum
from typing import Protocol

import attrs

from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import Failure

BACKOFF_CAP_SECONDS = 300.0
"""The longest wait before a relaunch, however many came before."""
BACKOFF_POLL_SECONDS = 0.2
"""How often a backoff looks for a stop request."""


class GiveUpReason(str, enum.Enum):
    """Why the watchdog relaunches no more."""

    NOT_RELAUNCHABLE = "not-relaunchable"
    """A task, a job without ``resume.args``, or ``maxRestarts`` 0."""
    BUDGET_SPENT = "budget-spent"
    """``maxRestarts`` relaunches in a row without checkpoint progress."""
    CRASH_LOOP = "crash-loop"
    """Crashed again at the point the last relaunch started from."""


@attrs.frozen
class Relaunch:
    """Relaunch the trainer from ``start_step`` (None: from scratch) after ``delay`` seconds."""

    start_step: int | None
    delay: float
    restart: int
    """The run's relaunches so far, this one included (``RunState.restarts``)."""
    used: int
    """Of the budget, the relaunches used since the last checkpoint progress, this one included."""
    budget: int
    """``maxRestarts``."""

    def event(self) -> AgentRecord:
        """The run's ``arena`` record that announces the relaunch (``restarting``)."""
        return agent_records.restarting(self.start_step, self.used, self.budget, self.delay)

    def describe(self) -> str:
        """The words of that record (``restarting from step 500 (attempt 1/3) in 5s``)."""
        return self.event().render()


@attrs.frozen
class GiveUp:
    """No relaunch: the run ends ``crashed``."""

    reason: GiveUpReason
    step: int | None
    """The last checkpoint's step when the watchdog gave up."""

    def crash_loop_evidence(self) -> str:
        """The ``crash-loop`` failure's evidence (before the previous failure is appended)."""
        where = f"step {self.step}" if self.step is not None else "the same point (no checkpoint)"
        return f"crashed again at {where} after a relaunch from it"

    def crash_loop_failure(self, previous: Failure | None) -> Failure:
        """The run's ``crash-loop`` failure, naming the failure before it (what crashed each time)."""
        evidence = self.crash_loop_evidence()
        if previous is not None:
            evidence += f"; last failure: {previous.kind}: {previous.evidence}"
        return Failure("crash-loop", evidence)


Decision = Relaunch | GiveUp


@attrs.frozen
class WatchdogRules:
    """A job's watchdog settings (from its spec)."""

    relaunchable: bool
    """A ``train`` job with ``resume.args``."""
    max_restarts: int
    backoff_seconds: float
    backoff_cap: float = BACKOFF_CAP_SECONDS

    @classmethod
    def for_job(
        cls, *, kind: str, resume_args: list[str], max_restarts: int, backoff_seconds: float
    ) -> WatchdogRules:
        return cls(
            relaunchable=kind == "train" and bool(resume_args),
            max_restarts=max_restarts,
            backoff_seconds=backoff_seconds,
        )


class Watchdog:
    """One run's relaunch decisions (see the module docstring)."""

    def __init__(self, rules: WatchdogRules) -> None:
        self.rules = rules
        self.budget_left = rules.max_restarts
        self.restarts = 0
        """Relaunches of this run so far (the backoff doubles with each)."""
        self._relaunched = False
        self._relaunched_from: int | None = None
        """The checkpoint step the last relaunch started from (None: from scratch)."""

    @classmethod
    def resumed(
        cls,
        rules: WatchdogRules,
        *,
        budget_left: int | None,
        restarts: int,
        relaunched_from: int | None,
        relaunched: bool,
    ) -> Watchdog:
        """A watchdog continuing a run's recorded position (a revived agent takes it over)."""
        watchdog = cls(rules)
        watchdog.budget_left = rules.max_restarts if budget_left is None else budget_left
        watchdog.restarts = restarts
        watchdog._relaunched = relaunched
        watchdog._relaunched_from = relaunched_from
        return watchdog

    def after_crash(self, checkpoint: int | None) -> Decision:
        """The trainer crashed with ``checkpoint`` the last one announced: relaunch, or give up."""
        if not self.rules.relaunchable or self.rules.max_restarts <= 0:
            return GiveUp(GiveUpReason.NOT_RELAUNCHABLE, checkpoint)
        if self._relaunched and checkpoint == self._relaunched_from:
            return GiveUp(GiveUpReason.CRASH_LOOP, checkpoint)
        if self._relaunched and _later(checkpoint, self._relaunched_from):
            self.budget_left = self.rules.max_restarts  # progress since the last relaunch
        if self.budget_left <= 0:
            return GiveUp(GiveUpReason.BUDGET_SPENT, checkpoint)
        self.budget_left -= 1
        self.restarts += 1
        self._relaunched = True
        self._relaunched_from = checkpoint
        return Relaunch(
            start_step=checkpoint,
            delay=self.backoff(self.restarts),
            restart=self.restarts,
            used=self.rules.max_restarts - self.budget_left,
            budget=self.rules.max_restarts,
        )

    def backoff(self, restart: int) -> float:
        """The wait before the run's ``restart``-th relaunch: doubling, capped."""
        return min(self.rules.backoff_seconds * 2.0 ** (restart - 1), self.rules.backoff_cap)

    @staticmethod
    def sit_out(relaunch: Relaunch, host: WatchdogHost) -> bool:
        """Wait out ``relaunch.delay``; False as soon as a stop request cancels the relaunch."""
        deadline = host.monotonic() + relaunch.delay
        while (left := deadline - host.monotonic()) > 0:
            host.pause(min(BACKOFF_POLL_SECONDS, left))
            if host.stop_requested():
                return False
        return True


class WatchdogHost(Protocol):
    """The clock and the run's files, as the watchdog's backoff sees them (the agent; a fake in tests)."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""

    def pause(self, seconds: float) -> None:
        """Wait up to ``seconds`` (sooner when woken), keeping the run's records up meanwhile."""

    def stop_requested(self) -> bool:
        """Whether a stop request for the run has arrived."""


def _later(checkpoint: int | None, since: int | None) -> bool:
    """Whether ``checkpoint`` is progress beyond ``since`` (None: no checkpoint)."""
    if checkpoint is None:
        return False
    return since is None or checkpoint > since
