"""``arena plot``: a run's loss curve as a PNG (needs the optional extra ``plot``: matplotlib)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

from arena_ls.client.errors import CliError

MAX_CHECKPOINT_MARKS = 50


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise CliError("arena plot needs matplotlib: pip install 'arena-ls[plot]'")


def loss_points(metrics: dict[str, Any]) -> list[tuple[int, float]]:
    points = []
    for point in metrics.get("points") or []:
        if not isinstance(point, dict):
            continue
        step, loss = point.get("step"), point.get("loss")
        if isinstance(step, int) and isinstance(loss, (int, float)) and math.isfinite(loss):
            points.append((step, float(loss)))
    return points


def checkpoint_steps(metrics: dict[str, Any]) -> list[int]:
    steps = {c.get("step") for c in metrics.get("checkpoints") or [] if isinstance(c, dict)}
    return sorted(s for s in steps if isinstance(s, int))


def write_loss_png(metrics: dict[str, Any], title: str, out: Path) -> None:
    """Plot loss against step, with the checkpoints as dotted lines, into ``out``."""
    points = loss_points(metrics)
    if not points:
        raise CliError(f"run {metrics.get('runId')} has no loss points to plot yet")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    try:
        axes.plot([s for s, _ in points], [loss for _, loss in points], linewidth=1.5, label="loss")
        checkpoints = checkpoint_steps(metrics)
        for index, step in enumerate(checkpoints[-MAX_CHECKPOINT_MARKS:]):
            axes.axvline(
                step,
                color="gray",
                linestyle=":",
                linewidth=0.8,
                label="checkpoint" if index == 0 else None,
            )
        axes.set_xlabel("step")
        axes.set_ylabel("loss")
        axes.set_title(title)
        axes.grid(True, alpha=0.3)
        axes.legend()
        figure.tight_layout()
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(out, format="png")
        except OSError as error:
            raise CliError(f"cannot write {out}: {error.strerror or error}") from error
    finally:
        pyplot.close(figure)
