"""Stalls an expert would act on (contract 8.2), as one pure policy with the clock injected.

A ``train`` run is stalled when no progress has been announced for

    ``threshold = min(max(stallFactor * median step time, stallMinSeconds), stallSeconds)``

seconds. The "step time" is what the supervisor sees of a step: the time
between two progress announcements that advanced the step (a trainer that
announces every 10 steps has a 10-step "step"), over the last
``STEP_WINDOW`` announcements of the attempt. Before the attempt has
announced two steps, nothing is known of its pace and the threshold is
``stallSeconds`` (a trainer that takes minutes to load is not stalled).
``stallSeconds`` is the ceiling: with ``stallMinSeconds`` above it, it wins.

When a run is silent past its threshold, the agent looks (``stall_probe``):
the trainer's Python stacks, its last lines, the CPU time its process tree
used over the silent window and, where GPUs can be read, the utilisation of
the GPUs its processes are on. Then ``judge`` decides:

- **still working**: its CPU time grew over the window by more than
  ``CPU_WORK_FRACTION`` of the window (at least ``CPU_WORK_MIN_SECONDS``),
  or a GPU it is on was busy (``GPU_BUSY_PERCENT``): a warning only,
  whatever ``stallAction`` says, and the words say why;
- **unknown**: its CPU time could not be read, or the window was too short
  to tell (under ``MIN_WINDOW_SECONDS``): a warning only (unsure is never a
  reason to stop a run);
- **idle** (neither grew): ``stallAction`` ``warn`` warns, ``restart``
  restarts (a cooperative stop, then a relaunch from the last checkpoint,
  counted as a relaunch by the watchdog), unless the job is not relaunched
  or no checkpoint is known (a restart would begin at step 0): then it
  warns and says why it did not restart.

A run still silent after a "still working" verdict with ``restart`` is
judged again every further threshold, on a fresh window: a busy loop that
later blocks is restarted then. Nothing here reads a clock or a process.
"""

from __future__ import annotations

import enum
import statistics
from collections import deque

import attrs

STEP_WINDOW = 64
"""How many of the attempt's latest step times the median is taken over."""
CPU_WORK_FRACTION = 0.02
"""CPU time grown by more than this share of the window (of one core) is work."""
CPU_WORK_MIN_SECONDS = 0.1
"""...and by at least this much (a sleeping interpreter wakes for a few milliseconds now and then)."""
MIN_WINDOW_SECONDS = 0.5
"""A window shorter than this tells nothing of the trainer's work (a threshold under a second)."""
GPU_BUSY_PERCENT = 5
"""A GPU that one of the trainer's processes is on, busy this much or more, is work."""


class StallAction(str, enum.Enum):
    """``watchdog.stallAction``."""

    WARN = "warn"
    RESTART = "restart"


@attrs.frozen
class StallRules:
    """A run's stall settings (``watchdog.*`` at its start)."""

    factor: float = 10.0
    min_seconds: float = 120.0
    max_seconds: float = 600.0
    action: StallAction = StallAction.WARN

    @classmethod
    def of(cls, factor: float, min_seconds: float, max_seconds: float, action: str) -> StallRules:
        """The rules as a run's spec keeps them (an unknown action is ``warn``: never a wrong restart)."""
        known = action in {a.value for a in StallAction}
        return cls(factor, min_seconds, max_seconds, StallAction(action) if known else StallAction.WARN)

    def threshold(self, step_seconds: list[float] | tuple[float, ...] | deque[float]) -> float:
        """Seconds of silence that make a stall, for an attempt whose step times are ``step_seconds``."""
        if not step_seconds:
            return self.max_seconds
        adaptive = max(self.factor * statistics.median(step_seconds), self.min_seconds)
        return min(adaptive, self.max_seconds)


@attrs.frozen
class WindowUse:
    """What the trainer used over the silent window (None: could not be read)."""

    seconds: float
    """The window's length."""
    cpu_seconds: float | None
    """CPU time (user + system) its process tree used over the window."""
    gpu_busy_percent: int | None = None
    """The highest utilisation seen of a GPU one of its processes is on; None: no such GPU was read."""
    gpu_note: str | None = None
    """Why no GPU use is known (no NVIDIA driver, not on a GPU), for the words."""

    @property
    def cpu_grew(self) -> bool:
        if self.cpu_seconds is None:
            return False
        return self.cpu_seconds > max(CPU_WORK_MIN_SECONDS, CPU_WORK_FRACTION * self.seconds)

    @property
    def gpu_busy(self) -> bool:
        return self.gpu_busy_percent is not None and self.gpu_busy_percent >= GPU_BUSY_PERCENT

    def describe(self) -> str:
        """``CPU 0.0s over 130s; GPU not readable (no NVIDIA driver)``."""
        cpu = "CPU time unreadable" if self.cpu_seconds is None else f"CPU {self.cpu_seconds:.1f}s"
        if self.gpu_busy_percent is not None:
            gpu = f"GPU busy up to {self.gpu_busy_percent}%"
        else:
            gpu = f"GPU use unknown ({self.gpu_note or 'not read'})"
        return f"{cpu} over the last {self.seconds:.0f}s; {gpu}"


class Verdict(str, enum.Enum):
    WORKING = "working"
    """Its CPU time or GPU use grew: never restarted."""
    UNKNOWN = "unknown"
    """Its CPU time could not be read: never restarted."""
    IDLE = "idle"
    """Neither grew: ``stallAction`` applies."""


@attrs.frozen
class StallDecision:
    """What ``judge`` answers: the verdict, whether to restart, and the words of the warning."""

    verdict: Verdict
    restart: bool
    message: str


@attrs.frozen
class RestartFacts:
    """What a restart needs: somewhere to resume from, and a job the watchdog relaunches."""

    checkpoint: int | None
    """The last checkpoint step known for the run (None: none)."""
    relaunchable: bool
    """A ``train`` job with ``resume.args`` and ``maxRestarts`` above 0."""

    def why_not(self) -> str | None:
        if not self.relaunchable:
            return "the job is not relaunched (no resume.args, or restart.maxRestarts 0)"
        if self.checkpoint is None:
            return "no checkpoint to restart from (a restart would begin again at step 0)"
        return None


def judge(
    rules: StallRules, silent: float, threshold: float, use: WindowUse, restart: RestartFacts
) -> StallDecision:
    """The stall's verdict and action (see the module docstring)."""
    head = f"no progress announced for {silent:.0f}s (stall threshold {threshold:.0f}s)"
    if use.cpu_grew or use.gpu_busy:
        what = "its CPU time grew" if use.cpu_grew else "its GPU is busy"
        tail = "; not restarted" if rules.action is StallAction.RESTART else ""
        words = f"{head}, but the trainer is still working ({what}: {use.describe()}){tail}"
        return StallDecision(Verdict.WORKING, False, words)
    if use.cpu_seconds is None or use.seconds < MIN_WINDOW_SECONDS:
        tail = ": not restarted" if rules.action is StallAction.RESTART else ""
        words = (
            f"{head}: the trainer is stalled, but whether it still works is unknown ({use.describe()}){tail}"
        )
        return StallDecision(Verdict.UNKNOWN, False, words)
    if rules.action is StallAction.RESTART and (why_not := restart.why_not()) is not None:
        return StallDecision(
            Verdict.IDLE,
            False,
            f"{head} and the trainer is idle ({use.describe()}): the trainer is stalled; "
            f"not restarted: {why_not}",
        )
    if rules.action is StallAction.RESTART:
        return StallDecision(
            Verdict.IDLE,
            True,
            f"{head} and the trainer is idle ({use.describe()}): the trainer is stalled; "
            "restarting it from its last checkpoint (watchdog.stallAction restart)",
        )
    return StallDecision(
        Verdict.IDLE, False, f"{head} and the trainer is idle ({use.describe()}): the trainer is stalled"
    )


class StallClock:
    """One attempt's pace and silence, fed by progress announcements and the agent's clock.

    ``due`` says when a judgement is needed; ``judged`` records one. Pure: the
    times come from the caller.
    """

    def __init__(self, rules: StallRules, now: float) -> None:
        self.rules = rules
        self.step_seconds: deque[float] = deque(maxlen=STEP_WINDOW)
        self.last_progress_at = now
        self._last_step: int | None = None
        self._last_step_at = now
        """When ``_last_step`` was first announced (a progress bar redraws a step many times)."""
        self._next_judgement_at: float | None = None
        """Silence (since ``last_progress_at``) at which the next judgement falls; None: none due."""
        self.stalled = False

    def progress(self, step: int, now: float) -> bool:
        """A progress announcement at ``now``; True when it ends a stall."""
        if self._last_step is not None and step > self._last_step:
            self.step_seconds.append(max(0.0, now - self._last_step_at))
        if self._last_step is None or step != self._last_step:
            self._last_step, self._last_step_at = step, now
        self.last_progress_at = now
        self._next_judgement_at = None
        was, self.stalled = self.stalled, False
        return was

    def threshold(self) -> float:
        return self.rules.threshold(self.step_seconds)

    def silent(self, now: float) -> float:
        return max(0.0, now - self.last_progress_at)

    def due(self, now: float) -> bool:
        """Whether the silence calls for a judgement now."""
        silent = self.silent(now)
        if self._next_judgement_at is not None:
            return silent >= self._next_judgement_at
        return not self.stalled and silent >= self.threshold()

    def judged(self, decision: StallDecision, now: float) -> None:
        """A judgement was made at ``now``: the run is stalled; with ``restart`` and a run still
        working, the next judgement falls one threshold later (a fresh window)."""
        self.stalled = True
        if self.rules.action is StallAction.RESTART and decision.verdict is not Verdict.IDLE:
            self._next_judgement_at = self.silent(now) + self.threshold()
        else:
            self._next_judgement_at = None
