"""``arena plot``: a job's whole curve across its resumed runs, as a PNG.

A training job often runs as several runs: stopped, then resumed from its
last checkpoint (``resumedFromStep``), and inside a run the agent may relaunch
a crashed trainer from its checkpoint. The curve is stitched by step: when
the steps go back (a resume or a relaunch), what came after that step is work
that was lost and is replaced by the new run's. The chain starts at the job's
latest fresh run (one that did not resume): a fresh start is a new curve.

Drawn: the training loss, the held-out loss where the trainer announces one
(``@arena {"event": "eval", ...}``), the learning rate on a second axis, each
checkpoint (dotted) and each resume and relaunch (solid, labelled), the marks
taken from the runs' history (see :func:`stitch`). Needs the optional extra
``plot`` (matplotlib).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from arena_ls.client.errors import CliError
from arena_ls.client.render import relaunch_costs
from arena_ls.validation import finite

MAX_CHECKPOINT_MARKS = 50
PLOTS_FOLDER = Path(".aide") / "plots"
"""Where ``arena plot`` writes by default, under the workspace root: beside the state
folder, ignored by git (the folder gets a ``.gitignore`` of ``*``)."""
PLOTS_GITIGNORE = "# Written by arena plot: the PNGs here are outputs, not sources.\n*\n"


def default_plot_path(root: Path, job_id: str) -> Path:
    """``.aide/plots/JOB-loss.png`` under ``root``; the folder is made, ignored by git."""
    folder = root / PLOTS_FOLDER
    if not folder.is_dir():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ".gitignore").write_text(PLOTS_GITIGNORE, encoding="utf-8")
        except OSError as error:
            raise CliError(f"cannot make {folder}: {error.strerror or error}") from error
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in job_id) or "job"
    return folder / f"{safe}-loss.png"


def require_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise CliError("arena plot needs matplotlib: pip install 'arena-ls[plot]'")


@attrs.frozen
class Resume:
    """Where the curve went back to a checkpoint: a new run, or a relaunch inside one."""

    step: int
    run_id: str
    relaunch: bool = False
    steps_lost: int | None = None
    """A relaunch's steps lost (``relaunches[].stepsLost`` of the metrics), when recorded."""
    downtime_seconds: float | None = None
    """A relaunch's downtime, crash to first progress (``relaunches[].downtimeSeconds``)."""

    def words(self) -> str:
        """The mark's text: ``relaunch · 3 steps lost · 2.4 s down``, ``resume RUN``."""
        if not self.relaunch:
            return f"resume {self.run_id}"
        return " · ".join(["relaunch", *relaunch_costs(self.steps_lost, self.downtime_seconds)])


@attrs.define
class JobCurve:
    """A job's curve stitched across runs; every list sorted by step."""

    run_ids: list[str] = attrs.field(factory=list)
    loss: list[tuple[int, float]] = attrs.field(factory=list)
    lr: list[tuple[int, float]] = attrs.field(factory=list)
    evals: list[tuple[int, float]] = attrs.field(factory=list)
    checkpoints: list[int] = attrs.field(factory=list)
    resumes: list[Resume] = attrs.field(factory=list)
    rollbacks: list[tuple[int, int]] = attrs.field(factory=list)
    """(spike step, step rolled back to) of each loss-spike rollback (contract 8.2)."""

    @property
    def empty(self) -> bool:
        return not (self.loss or self.evals)


def _step(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def resume_chain(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's runs from its latest fresh start on, oldest first (``runs`` in start order)."""
    start = 0
    for index, run in enumerate(runs):
        if _step(run.get("resumedFromStep")) is None:
            start = index
    return list(runs[start:])


def _cut(series: list[tuple[int, float]], step: int) -> None:
    """Drop the points at ``step`` and after: a resume from before them lost that work."""
    while series and series[-1][0] >= step:
        series.pop()


def _append(series: list[tuple[int, float]], step: int, value: float | None) -> None:
    """Add a point; one at this step or later (from before a relaunch) is replaced."""
    _cut(series, step)
    if value is not None:
        series.append((step, value))


def stitch(runs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> JobCurve:
    """Stitch ``(RunInfo, arena/metrics result)`` pairs, oldest first, into one curve.

    The marks come from the runs' history, never from the shape of the curve: a
    resume where a run says it resumed (``resumedFromStep``), a relaunch where the
    agent logged one (``relaunches`` of its metrics). Steps that go back without
    either (a trainer that repeats a step) only replace the points they repeat.
    """
    curve = JobCurve()
    checkpoints: set[int] = set()
    for position, (info, metrics) in enumerate(runs):
        run_id = str(info.get("runId") or metrics.get("runId") or "?")
        curve.run_ids.append(run_id)
        resumed_from = _step(info.get("resumedFromStep"))
        if resumed_from is not None:
            for series in (curve.loss, curve.lr, curve.evals):
                _cut(series, resumed_from + 1)
            if position > 0:
                curve.resumes.append(Resume(resumed_from, run_id))
        curve.resumes.extend(_relaunches(run_id, metrics.get("relaunches")))
        curve.rollbacks.extend(rollback_marks(metrics.get("rollbacks")))
        _add_points(curve, metrics.get("points") or [])
        for point in metrics.get("evals") or []:
            step = _step(point.get("step")) if isinstance(point, dict) else None
            if step is not None:
                _append(curve.evals, step, finite(point.get("loss")))
        for checkpoint in metrics.get("checkpoints") or []:
            step = _step(checkpoint.get("step")) if isinstance(checkpoint, dict) else None
            if step is not None:
                checkpoints.add(step)
    curve.checkpoints = sorted(checkpoints)
    return curve


def _relaunches(run_id: str, relaunches: Any) -> list[Resume]:
    """The relaunches the agent logged in a run, each at the step it relaunched from."""
    if not isinstance(relaunches, list):
        return []
    found = []
    for item in relaunches:
        step = _step(item.get("step")) if isinstance(item, dict) else None
        if step is None:
            continue
        lost = _step(item.get("stepsLost"))
        down = item.get("downtimeSeconds")
        down = float(down) if isinstance(down, (int, float)) and not isinstance(down, bool) else None
        found.append(Resume(step, run_id, relaunch=True, steps_lost=lost, downtime_seconds=down))
    return found


def rollback_marks(rollbacks: Any) -> list[tuple[int, int]]:
    """The loss-spike rollbacks of a run's metrics: (spike step, step rolled back to)."""
    if not isinstance(rollbacks, list):
        return []
    marks = []
    for item in rollbacks:
        if isinstance(item, dict):
            spike, back_to = _step(item.get("spikeStep")), _step(item.get("step"))
            if spike is not None and back_to is not None:
                marks.append((spike, back_to))
    return marks


def _add_points(curve: JobCurve, points: list[Any]) -> None:
    """A run's points; one at a step already drawn replaces it and what came after."""
    for point in points:
        step = _step(point.get("step")) if isinstance(point, dict) else None
        if step is None:
            continue
        _append(curve.loss, step, finite(point.get("loss")))
        _append(curve.lr, step, finite(point.get("lr")))


def code_subtitle(chain: Sequence[dict[str, Any]]) -> str | None:
    """The plot's subtitle from the runs' records (contract 8.3): the newest run's commit and
    whether its tree was dirty, and any other commit an earlier run of the curve trained with;
    None when no run recorded a repository."""
    codes: list[str] = []
    for run in reversed(chain):
        record = run.get("record")
        git = record.get("git") if isinstance(record, dict) else None
        if not isinstance(git, dict):
            continue
        commit = str(git.get("commit") or "no commit yet")[:12]
        code = f"{commit} (dirty)" if git.get("dirty") else commit
        if code not in codes:
            codes.append(code)
    if not codes:
        return None
    earlier = f" · earlier runs: {', '.join(codes[1:4])}" if len(codes) > 1 else ""
    return f"code {codes[0]}{earlier}"


def write_curve_png(curve: JobCurve, title: str, out: Path, subtitle: str | None = None) -> None:
    """Loss (and held-out loss) against step, the learning rate on a second axis,
    checkpoints dotted and resumes solid, into ``out``; ``subtitle`` under the title."""
    if curve.empty:
        raise CliError("no loss points to plot yet")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(9, 4.8), dpi=100)
    try:
        _draw(curve, axes)
        axes.set_title(f"{title}\n{subtitle}" if subtitle else title)
        figure.tight_layout()
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(out, format="png")
        except OSError as error:
            raise CliError(f"cannot write {out}: {error.strerror or error}") from error
    finally:
        pyplot.close(figure)


def _draw(curve: JobCurve, axes: Any) -> None:
    if curve.loss:
        axes.plot(*zip(*curve.loss, strict=True), linewidth=1.4, color="C0", label="loss")
    if curve.evals:
        axes.plot(*zip(*curve.evals, strict=True), "o-", markersize=3, color="C1", label="eval loss")
    for index, step in enumerate(curve.checkpoints[-MAX_CHECKPOINT_MARKS:]):
        label = "checkpoint" if index == 0 else None
        axes.axvline(step, color="gray", linestyle=":", linewidth=0.8, label=label)
    labelled: set[bool] = set()
    for resume in curve.resumes:
        label = None if resume.relaunch in labelled else ("relaunch" if resume.relaunch else "resume")
        labelled.add(resume.relaunch)
        style = "--" if resume.relaunch else "-"
        axes.axvline(resume.step, color="C3", linestyle=style, linewidth=1.2, label=label)
        axes.annotate(
            resume.words(), (resume.step, 1.0), xycoords=("data", "axes fraction"),
            rotation=90, va="top", ha="right", fontsize=7, color="C3", xytext=(0, -4),
            textcoords="offset points",
        )  # fmt: skip
    for index, (spike, back_to) in enumerate(curve.rollbacks):
        axes.axvline(
            spike, color="C1", linestyle="-.", linewidth=1.2, label="rollback" if index == 0 else None
        )
        axes.annotate(
            f"spike: rolled back to {back_to}", (spike, 1.0), xycoords=("data", "axes fraction"),
            rotation=90, va="top", ha="right", fontsize=7, color="C1", xytext=(0, -4),
            textcoords="offset points",
        )  # fmt: skip
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.grid(True, alpha=0.3)
    handles, labels = axes.get_legend_handles_labels()
    if curve.lr:
        lr_axes = axes.twinx()
        lr_axes.plot(*zip(*curve.lr, strict=True), "--", linewidth=1.0, color="C2", label="learning rate")
        lr_axes.set_ylabel("learning rate")
        lr_handles, lr_labels = lr_axes.get_legend_handles_labels()
        handles, labels = handles + lr_handles, labels + lr_labels
    axes.legend(handles, labels, loc="upper right", fontsize=8)
