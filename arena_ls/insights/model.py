"""What the insight rules look at (observations of one run) and what they give (insights)."""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

import attrs

from arena_ls.lifecycle.health_line import HealthPoint
from arena_ls.timeutil import iso_utc

__all__ = ["CheckpointMark", "GpuSample", "HealthPoint", "Insight", "LossPoint", "Observations", "Severity"]

Severity = Literal["info", "warning"]

MAX_LOSSES = 512
MAX_HEALTH = 256
MAX_CHECKPOINTS = 16
MAX_GPU_SAMPLES = 2048


@attrs.frozen
class LossPoint:
    """A finite loss announced at a step (time: seconds since the epoch)."""

    step: int
    loss: float
    at: float


@attrs.frozen
class CheckpointMark:
    """A checkpoint announcement."""

    step: int
    at: float


@attrs.frozen
class GpuSample:
    """The GPU as the run's own processes see it, at one health sample.

    ``utilization`` and the temperatures are those of the GPU(s) the run's
    processes are on (the highest, when several); ``memory_mb`` is the sum of
    the run's own processes' memory.
    """

    at: float
    utilization: float | None
    memory_mb: int | None
    temperature: int | None = None
    slowdown_temperature: int | None = None


@attrs.define
class Observations:
    """Everything seen of one run's current launch; bounded."""

    losses: deque[LossPoint] = attrs.field(factory=lambda: deque(maxlen=MAX_LOSSES))
    health: deque[HealthPoint] = attrs.field(factory=lambda: deque(maxlen=MAX_HEALTH))
    checkpoints: deque[CheckpointMark] = attrs.field(factory=lambda: deque(maxlen=MAX_CHECKPOINTS))
    gpu: deque[GpuSample] = attrs.field(factory=lambda: deque(maxlen=MAX_GPU_SAMPLES))
    launched_at: float | None = None
    """When the current launch started (a relaunch reads the trainer anew)."""
    launch_step: int = 0
    """The step the current launch started from (0, or the resumed checkpoint's)."""
    step: int | None = None
    """The last step announced."""
    first_progress_at: float | None = None
    """The first progress of the current launch: from here on the trainer computes."""
    trainer_modified_at: float | None = None
    """The trainer file's modification time, as last seen."""
    max_vram_mb: int = 5120
    """The job's ``probe.maxVramMb``."""
    ram_available_mb: int | None = None
    """The machine's available RAM at the latest health sample (``low-ram``)."""
    ram_floor_mb: int = 5120
    """The pre-flight floor (``preflight.minFreeRamMb``) as it is now."""

    def add_progress(self, step: int, loss: float | None, at: float) -> None:
        self.step = step
        if self.first_progress_at is None:
            self.first_progress_at = at
            if not self.checkpoints or (self.launched_at and self.checkpoints[-1].at < self.launched_at):
                # A launch resumed from a checkpoint of an earlier run starts near its first step.
                self.launch_step = max(self.launch_step, step - 1)
        if loss is not None and loss == loss and abs(loss) != float("inf"):
            self.losses.append(LossPoint(step, loss, at))

    def add_checkpoint(self, step: int, at: float) -> None:
        """One mark per save: a save announced twice (its plain ``saved checkpoint`` line, then
        ``@arena``, before the parser knows the trainer speaks ``@arena``) is one checkpoint. Two
        marks at one step made the cadence 0 steps and a few milliseconds, so the run looked
        overdue a moment after every such save."""
        if self.checkpoints and self.checkpoints[-1].step == step:
            self.checkpoints.pop()
        self.checkpoints.append(CheckpointMark(step, at))

    def relaunched(self, at: float) -> None:
        """A new launch of the trainer: what was computed before no longer says how it runs now."""
        self.launched_at = at
        self.launch_step = self.checkpoints[-1].step if self.checkpoints else 0
        self.first_progress_at = None
        self.gpu.clear()


@attrs.frozen
class Insight:
    """One insight that holds: the contract's ``{kind, severity, message, since}``."""

    kind: str
    severity: Severity
    message: str
    since: float

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "since": iso_utc(self.since),
        }
