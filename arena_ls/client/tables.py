"""``arena status`` as readable tables: jobs, the active run, recent runs, health."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table

from arena_ls.client.interrupted import offer_row, offers
from arena_ls.client.keep_awake import keep_awake_text
from arena_ls.client.render import (
    fmt_duration,
    fmt_loss,
    fmt_step,
    relaunch_costs,
    resumed_from_text,
    run_place,
)
from arena_ls.client.visible_controls import visible_data

RECENT_RUNS = 5


NO_JOBS = "no jobs in the manifest"
BROKEN_MANIFEST = "none: the manifest has a problem (said above)"


def print_status(
    console: Console, status: dict[str, Any], *, no_jobs: str = NO_JOBS, keep_awake_reason: str | None = None
) -> None:
    """The tables; ``no_jobs`` is what the jobs table says when it is empty; ``keep_awake_reason``
    why the active run cannot keep the machine awake (its log's line, read by the caller)."""
    reason = visible_data(keep_awake_reason)
    renderables = status_renderables(visible_data(status), no_jobs=no_jobs, keep_awake_reason=reason)
    for renderable in renderables:
        console.print(renderable)


def status_renderables(
    status: dict[str, Any], *, no_jobs: str = NO_JOBS, keep_awake_reason: str | None = None
) -> list[RenderableType]:
    runs = [r for r in status.get("runs") or [] if isinstance(r, dict)]
    return [
        jobs_table(status.get("jobs") or [], no_jobs=no_jobs),
        active_table(status.get("active"), keep_awake_reason),
        runs_table(runs[-RECENT_RUNS:]),
        *interrupted_tables(runs),
        health_table(status.get("health") or {}, status.get("deviceProfile")),
        *gpu_tables(status.get("health") or {}),
    ]


def interrupted_tables(runs: list[dict[str, Any]]) -> list[Table]:
    """The runs a restart of the machine interrupted, with the command that resumes each (8.3)."""
    waiting = offers(runs)
    if not waiting:
        return []
    table = Table(title="Interrupted by a restart of the machine", title_justify="left", show_header=False)
    table.add_column("run")
    table.add_column("offer")
    for run in reversed(waiting):
        table.add_row(str(run.get("runId")), offer_row(run))
    return [table]


def record_text(record: Any) -> str:
    """``RunInfo.record`` in a line: the commit and whether it was dirty, then the interpreter."""
    if not isinstance(record, dict):
        return "-"
    git = record.get("git")
    if isinstance(git, dict):
        commit = str(git.get("commit") or "no commit yet")[:12]
        code = f"{commit} (dirty)" if git.get("dirty") else commit
    else:
        code = "not in a git repository"
    python = record.get("python")
    version = f" {python['version']}" if isinstance(python, dict) and python.get("version") else ""
    return f"{code} · python{version}"


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


def jobs_table(jobs: list[dict[str, Any]], *, no_jobs: str = NO_JOBS) -> Table:
    table = Table(title="Jobs", title_justify="left")
    for column in ("id", "name", "kind", "status", "runnable", "blocked by", "probe"):
        table.add_column(column)
    for job in jobs:
        codes = sorted({str(d.get("code")) for d in job.get("blockedBy") or [] if isinstance(d, dict)})
        table.add_row(
            str(job.get("id")),
            str(job.get("name")),
            str(job.get("kind")),
            str(job.get("status")),
            _yes_no(job.get("runnable")),
            ", ".join(codes) or "-",
            probe_text(job.get("probe")),
        )
    if not jobs:
        table.add_row("-", no_jobs, "", "", "", "", "")
    return table


def active_table(active: dict[str, Any] | None, keep_awake_reason: str | None = None) -> Table:
    table = Table(title="Active run", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    if not isinstance(active, dict):
        table.add_row("run", "none")
        return table
    speed = active.get("stepsPerSecond")
    for name, value in (
        ("run", f"{active.get('runId')} (job {run_place(active)})"),
        ("status", str(active.get("status")) + (" · stalled" if active.get("stalled") else "")),
        ("pid", f"{active.get('pid')} (agent {active.get('agentPid')})"),
        ("step", fmt_step(active.get("step"), active.get("totalSteps"))),
        ("loss", fmt_loss(active.get("loss"))),
        ("speed", f"{speed:.3g} it/s" if isinstance(speed, (int, float)) else "?"),
        ("ETA", fmt_duration(active.get("etaSeconds"))),
        ("last checkpoint", checkpoint_text(active.get("lastCheckpoint"))),
        ("resumed from", resumed_from_text(active.get("resumedFrom"))),
        ("restarts", str(active.get("restarts"))),
        ("started", str(active.get("startedAt"))),
        ("code", record_text(active.get("record"))),
    ):
        table.add_row(name, value)
    awake = keep_awake_text(active, keep_awake_reason)
    if awake is not None:
        table.add_row("machine", awake)
    for insight in active.get("insights") or []:
        table.add_row("insight", insight_text(insight))
    for relaunch in relaunch_rows(active.get("relaunches")):
        table.add_row("relaunch", relaunch)
    return table


def relaunch_rows(relaunches: Any) -> list[str]:
    """Each relaunch of the run, as a person compares them: ``from step 40 · 3 steps lost · 2.4 s down``."""
    rows = []
    for item in relaunches if isinstance(relaunches, list) else []:
        if not isinstance(item, dict):
            continue
        start = item.get("fromStep")
        where = f"from step {start}" if isinstance(start, int) else "from scratch"
        lost = item.get("stepsLost")
        down = item.get("downtimeSeconds")
        costs = relaunch_costs(
            lost if isinstance(lost, int) and not isinstance(lost, bool) else None,
            float(down) if isinstance(down, (int, float)) and not isinstance(down, bool) else None,
        )
        if not isinstance(down, (int, float)):
            costs.append("not resumed yet")
        rows.append(" · ".join([where, *costs]))
    return rows


def insight_text(insight: Any) -> str:
    """``warning loss-spike (since ...): what to do`` for one of ``RunInfo.insights``."""
    if not isinstance(insight, dict):
        return str(insight)
    return (
        f"{insight.get('severity')} {insight.get('kind')} (since {insight.get('since')}): "
        f"{insight.get('message')}"
    )


def probe_text(probe: Any) -> str:
    """``JobInfo.probe`` in a word or two: passed/failed and the peak."""
    if not isinstance(probe, dict):
        return "-"
    peak = probe.get("peakVramMb")
    verdict = "passed" if probe.get("ok") else "failed"
    return f"{verdict} ({peak} MB)" if peak is not None else verdict


def checkpoint_text(checkpoint: Any) -> str:
    if not isinstance(checkpoint, dict):
        return "none"
    return f"step {checkpoint.get('step')}: {checkpoint.get('path')} ({checkpoint.get('at')})"


def runs_table(runs: list[dict[str, Any]]) -> Table:
    table = Table(title="Recent runs", title_justify="left")
    for column in ("run", "job", "status", "stopped by", "exit", "step", "ended", "code"):
        table.add_column(column)
    for run in runs:
        table.add_row(
            str(run.get("runId")),
            run_place(run),
            str(run.get("status")),
            str(run.get("stoppedBy") or "-"),
            str(run.get("exitCode") if run.get("exitCode") is not None else run.get("signal") or "-"),
            fmt_step(run.get("step"), run.get("totalSteps")),
            str(run.get("endedAt") or "-"),
            record_text(run.get("record")).split(" · ")[0],
        )
    if not runs:
        table.add_row("-", "no runs yet", "", "", "", "", "", "")
    return table


def health_table(health: dict[str, Any], device_profile: Any) -> Table:
    table = Table(title="Health", title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    ram, cpu = health.get("ram") or {}, health.get("cpu") or {}
    table.add_row(
        "RAM",
        f"{ram.get('availableMb')} MB free of {ram.get('totalMb')} MB ({ram.get('percent')}% used)",
    )
    table.add_row("CPU", f"{cpu.get('percent')}% of {cpu.get('count')} cores")
    table.add_row("battery", battery_text(health.get("battery")))
    table.add_row("GPUs", str(len(health.get("gpus") or [])))
    if health.get("gpuError"):
        table.add_row("GPU error", str(health["gpuError"]))
    if device_profile is not None:
        text = device_profile if isinstance(device_profile, str) else json.dumps(device_profile)
        table.add_row("device profile", text)
    table.add_row("sampled at", str(health.get("at")))
    for cluster in health.get("clusters") or []:
        if isinstance(cluster, dict):
            table.add_row(f"cluster {cluster.get('name')}", cluster_text(cluster))
    return table


def cluster_text(cluster: dict[str, Any]) -> str:
    """``1 node, 2 CPUs, 1 GPU (A100)``, the error, or that no sample has come back yet."""
    if cluster.get("error"):
        return f"error: {cluster['error']}"
    if cluster.get("nodes") is None:
        return "not sampled yet"
    nouns = (("nodes", "node"), ("cpus", "CPU"), ("gpus", "GPU"))
    counts = [_count(cluster.get(key), noun) for key, noun in nouns]
    names = [str(name) for name in cluster.get("gpuNames") or []]
    return ", ".join(counts) + (f" ({', '.join(names)})" if names else "")


def _count(value: Any, noun: str) -> str:
    return f"{value} {noun}" if value == 1 else f"{value} {noun}s"


def battery_text(battery: Any) -> str:
    if not isinstance(battery, dict):
        return "none"
    plugged = "plugged in" if battery.get("pluggedIn") else "on battery"
    return f"{battery.get('percent')}% ({plugged})"


def gpu_tables(health: dict[str, Any]) -> list[Table]:
    gpus = [g for g in health.get("gpus") or [] if isinstance(g, dict)]
    if not gpus:
        return []
    table = Table(title="GPUs", title_justify="left")
    for column in ("#", "name", "memory", "util", "temp", "cc", "processes"):
        table.add_column(column)
    for gpu in gpus:
        table.add_row(
            str(gpu.get("index")),
            str(gpu.get("name")),
            f"{gpu.get('memoryUsedMb')}/{gpu.get('memoryTotalMb')} MB",
            f"{gpu.get('utilization')}%",
            f"{gpu.get('temperature')}°C",
            str(gpu.get("computeCapability")),
            processes_text(gpu.get("processes") or []),
        )
    return [table]


def processes_text(processes: list[Any]) -> str:
    parts = []
    for process in processes:
        if isinstance(process, dict):
            ours = " (ours)" if process.get("ours") else ""
            parts.append(f"{process.get('pid')}: {process.get('usedMemoryMb')} MB{ours}")
    return ", ".join(parts) or "-"
