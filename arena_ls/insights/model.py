"""What the insight rules look at (observations of one run) and what they give (insights)."""

from __future__ import annotations

from collections import deque
from typing import Any, Literal

import attrs

from arena_ls.lifecycle.health_line import HealthPoint
from arena_ls.timeutil import iso_utc

__all__ = [
    "CheckpointMark",
    "DiskSample",
    "DiskWindow",
    "GpuSample",
    "HealthPoint",
    "Insight",
    "LossPoint",
    "Observations",
    "Severity",
]

Severity = Literal["info", "warning"]

MAX_LOSSES = 512
MAX_HEALTH = 256
MAX_CHECKPOINTS = 16
MAX_GPU_SAMPLES = 2048
MAX_CHECKPOINT_PATHS = 256


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


@attrs.frozen
class DiskSample:
    """One disk as a run uses it, at one reading (``disk-runway``)."""

    at: float
    used_bytes: int
    """What the run has on this disk: its checkpoints there and/or its log."""
    free_bytes: int


@attrs.define
class DiskWindow:
    """The first and the latest reading of one disk over the run: the rate its use grows at."""

    label: str
    """What of the run is on it, in words (``the checkpoints in /data/ckpt and the run's log``)."""
    first: DiskSample
    last: DiskSample


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
    total_steps: int | None = None
    """The run's last step, as announced (``disk-runway``)."""
    pace_from: tuple[int, float] | None = None
    """The current launch's first progress (step, at): its pace is measured from there."""
    last_progress: tuple[int, float] | None = None
    checkpoint_paths: dict[str, None] = attrs.field(factory=dict)
    """Every checkpoint path this run announced (bounded, oldest first): what it has on disk."""
    disks: dict[str, DiskWindow] = attrs.field(factory=dict)
    """Each disk the run's checkpoints or log are on, by its device (``disk-runway``)."""

    def add_progress(self, step: int, loss: float | None, at: float, total: int | None = None) -> None:
        self.step = step
        if total is not None and total > 0:
            self.total_steps = total
        if self.pace_from is None:
            self.pace_from = (step, at)
        self.last_progress = (step, at)
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

    def add_checkpoint_path(self, path: str) -> None:
        self.checkpoint_paths.pop(path, None)
        self.checkpoint_paths[path] = None
        while len(self.checkpoint_paths) > MAX_CHECKPOINT_PATHS:
            del self.checkpoint_paths[next(iter(self.checkpoint_paths))]

    def add_disk_sample(self, device: str, label: str, sample: DiskSample) -> None:
        """A reading of one disk: the first one of the run stays, the latest replaces the last."""
        window = self.disks.get(device)
        if window is None:
            self.disks[device] = DiskWindow(label, sample, sample)
        else:
            window.label, window.last = label, sample

    def seconds_to_last_step(self) -> float | None:
        """At the current launch's pace, how long until the run's last step; None when unknown."""
        if self.total_steps is None or self.pace_from is None or self.last_progress is None:
            return None
        (from_step, from_at), (step, at) = self.pace_from, self.last_progress
        if step >= self.total_steps:
            return None
        if step <= from_step or at <= from_at:
            return None
        return (self.total_steps - step) / ((step - from_step) / (at - from_at))

    def relaunched(self, at: float) -> None:
        """A new launch of the trainer: what was computed before no longer says how it runs now."""
        self.launched_at = at
        self.launch_step = self.checkpoints[-1].step if self.checkpoints else 0
        self.first_progress_at = None
        self.pace_from = None
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
