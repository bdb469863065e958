"""Speed and ETA from progress announcements, and the text of a progress bar."""

from __future__ import annotations

import math
from collections import deque

import attrs

WINDOW_SECONDS = 30.0


@attrs.define
class ProgressTracker:
    """A moving average of steps per second over the last ``WINDOW_SECONDS``."""

    step: int | None = None
    total: int | None = None
    loss: float | None = None
    lr: float | None = None
    samples: deque[tuple[float, int]] = attrs.field(factory=lambda: deque(maxlen=512))

    def update(self, step: int, total: int | None, loss: float | None, lr: float | None, at: float) -> None:
        if self.step is not None and step < self.step:
            self.samples.clear()  # a relaunch from an earlier checkpoint
        self.step = step
        self.total = total if total is not None else self.total
        self.loss = loss if loss is not None else self.loss
        self.lr = lr if lr is not None else self.lr
        self.samples.append((at, step))
        while len(self.samples) > 2 and at - self.samples[0][0] > WINDOW_SECONDS:
            self.samples.popleft()

    def reset_speed(self) -> None:
        self.samples.clear()

    def rewind(self, step: int) -> None:
        """A relaunch resumes at ``step``: the steps past it are lost, and so is the speed."""
        self.step = step
        self.samples.clear()

    @property
    def steps_per_second(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        if t1 <= t0 or s1 <= s0:
            return None
        return (s1 - s0) / (t1 - t0)

    @property
    def eta_seconds(self) -> float | None:
        speed = self.steps_per_second
        if speed is None or self.total is None or self.step is None:
            return None
        return max(0.0, (self.total - self.step) / speed)

    @property
    def percentage(self) -> int | None:
        if self.total is None or self.step is None or self.total <= 0:
            return None
        return max(0, min(100, int(100 * self.step / self.total)))

    def message(self) -> str:
        """``step 120/2000 · loss 2.31 · 3.2 it/s · ETA 9m``."""
        if self.step is None:
            return "starting"
        parts = [f"step {self.step}/{self.total}" if self.total else f"step {self.step}"]
        if self.loss is not None:
            parts.append(f"loss {format_loss(self.loss)}")
        speed = self.steps_per_second
        if speed is not None:
            parts.append(f"{speed:.1f} it/s")
        eta = self.eta_seconds
        if eta is not None:
            parts.append(f"ETA {format_duration(eta)}")
        return " · ".join(parts)


def format_loss(loss: float) -> str:
    if not math.isfinite(loss):
        return str(loss)
    return f"{loss:.2f}" if abs(loss) >= 0.01 else f"{loss:.2e}"


def format_duration(seconds_float: float) -> str:
    seconds = round(seconds_float)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
