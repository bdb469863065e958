"""What every benchmark shares: figures with median and spread, workspaces, processes, CPU.

A benchmark returns a ``Section``: named ``Figure``s (every sample kept, so
the median and the spread can be printed and stored) and free-form facts
(counts, checks, notes). Ratios are figures too: one sample per repeat,
each the ratio of the two measurements taken side by side in that repeat,
so the spread of a ratio shows how much the machine's noise moved it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import psutil

BENCH_DIR = Path(__file__).resolve().parent
TRAINERS = BENCH_DIR / "trainers"
REPO = BENCH_DIR.parent


@attrs.define
class Figure:
    """One measured quantity: every sample, plus its target when it has one."""

    name: str
    unit: str
    samples: list[float] = attrs.field(factory=list)
    target: str | None = None
    """A human-readable target such as ``<= 1.0``; checked by ``meets``."""

    def add(self, value: float) -> None:
        self.samples.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    @property
    def low(self) -> float:
        return min(self.samples) if self.samples else math.nan

    @property
    def high(self) -> float:
        return max(self.samples) if self.samples else math.nan

    @property
    def meets(self) -> bool | None:
        """Whether the median meets the target (None without a target or samples)."""
        if self.target is None or not self.samples:
            return None
        op, _, bound = self.target.partition(" ")
        limit = float(bound)
        return {"<=": self.median <= limit, "<": self.median < limit, ">=": self.median >= limit}[op]

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "median": _round(self.median),
            "min": _round(self.low),
            "max": _round(self.high),
            "spread": _round(self.high - self.low) if self.samples else None,
            "samples": [_round(s) for s in self.samples],
            "target": self.target,
            "meets": self.meets,
        }

    def line(self) -> str:
        """``name  median unit  [min .. max, n=3]  target``, for the console."""
        if not self.samples:
            return f"{self.name:<44} (no samples)"
        spread = f"[{_fmt(self.low)} .. {_fmt(self.high)}, n={len(self.samples)}]"
        verdict = ""
        if self.target is not None:
            verdict = f"  target {self.target}: {'met' if self.meets else 'MISSED'}"
        return f"{self.name:<44} {_fmt(self.median):>10} {self.unit:<6} {spread}{verdict}"


@attrs.define
class Section:
    """The result of one benchmark."""

    name: str
    title: str
    figures: dict[str, Figure] = attrs.field(factory=dict)
    facts: dict[str, Any] = attrs.field(factory=dict)
    seconds: float = 0.0
    error: str | None = None

    def figure(self, key: str, unit: str, target: str | None = None) -> Figure:
        if key not in self.figures:
            self.figures[key] = Figure(key, unit, target=target)
        return self.figures[key]

    def ratio(self, key: str, top: Figure, bottom: Figure, target: str | None = None) -> Figure:
        """Per-repeat ratios of two figures measured side by side."""
        figure = self.figure(key, "x", target)
        figure.samples = [a / b for a, b in zip(top.samples, bottom.samples, strict=False) if b > 0]
        return figure

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "seconds": round(self.seconds, 2),
            "error": self.error,
            "figures": {key: fig.to_json() for key, fig in self.figures.items()},
            "facts": self.facts,
        }

    def print(self) -> None:
        print(f"\n== {self.name}: {self.title} ({self.seconds:.1f} s)", flush=True)
        if self.error:
            print(f"   ERROR: {self.error}")
        for figure in self.figures.values():
            print(f"   {figure.line()}")
        for key, value in self.facts.items():
            print(f"   {key}: {value}")
        sys.stdout.flush()


def _round(value: float) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, 6)


def _fmt(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if abs(value) >= 100:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def percentile(values: list[float], pct: float) -> float:
    """Linear-interpolated percentile of ``values`` (``pct`` in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# --------------------------------------------------------------------------- workspaces


def trainer(name: str) -> str:
    return str(TRAINERS / name)


def task_job(job_id: str, script: str, *args: str) -> dict[str, Any]:
    """A ``task`` job running one of the benchmark trainers with ``{python}``.

    The trainer is named inside the workspace (``workspace`` copies them
    there): a manifest argument naming a file outside is AR110.
    """
    return {
        "id": job_id,
        "kind": "task",
        "command": "{python}",
        "args": [f"trainers/{script}", *args],
        "status": "ready",
    }


@contextlib.contextmanager
def workspace(jobs: list[dict[str, Any]], prefix: str = "arena-bench-") -> Iterator[Path]:
    """A temporary workspace with a manifest listing ``jobs``; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        shutil.copytree(TRAINERS, root / "trainers", ignore=shutil.ignore_patterns("__pycache__"))
        (root / "training").mkdir()
        (root / "training" / "manifest.json").write_text(json.dumps({"version": 1, "jobs": jobs}, indent=2))
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def scratch(prefix: str = "arena-bench-") -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def trainer_env(*, unbuffered: bool) -> dict[str, str]:
    """The environment for a trainer run outside arena-ls, with or without PYTHONUNBUFFERED."""
    env = dict(os.environ)
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


# --------------------------------------------------------------------------- processes


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (None once it is gone)."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def rss_mb(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).memory_info().rss) / (1 << 20)
    except psutil.Error:
        return None


class CpuWatch:
    """Samples a process's CPU seconds in a thread, so a process that exits still has a last figure."""

    def __init__(self, pid: int, interval: float = 0.005) -> None:
        self.pid = pid
        self.interval = interval
        self.first = cpu_seconds(pid)
        self.last = self.first
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            value = cpu_seconds(self.pid)
            if value is None:
                return
            self.last = value

    def finish(self) -> float | None:
        """CPU seconds used since the watch began (up to the last sample before an exit)."""
        self._stop.set()
        self._thread.join()
        value = cpu_seconds(self.pid)
        if value is not None:
            self.last = value
        if self.first is None or self.last is None:
            return None
        return self.last - self.first


def pid_gone(pid: int) -> bool:
    """True when no process (not even a zombie) has ``pid``."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def zombies_among(pids: list[int]) -> list[int]:
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                found.append(pid)
    return found


def kill_group(pgid: int) -> None:
    """Last-resort cleanup of a process group this benchmark started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, 9)


def check_shared_clock() -> float:
    """Check that ``time.perf_counter`` of a child process reads the same clock as ours.

    The latency benchmarks compare a trainer's stamp with the client's
    receipt time. On Linux ``perf_counter`` is the system-wide
    CLOCK_MONOTONIC; this makes sure of it (a child's reading must fall
    between ours before and after) and returns the bracket width in seconds.
    """
    before = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(repr(time.perf_counter()))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    after = time.perf_counter()
    child = float(out.strip())
    if not before <= child <= after:
        raise RuntimeError(
            f"time.perf_counter is not shared between processes here ({before} <= {child} <= {after} fails);"
            " the latency benchmarks cannot compare stamps"
        )
    return after - before


def machine() -> dict[str, Any]:
    """nproc, RAM, CPU model, load: the machine the figures were taken on."""
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return {
        "nproc": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / (1 << 30), 1),
        "cpu_model": model,
        "python": sys.version.split()[0],
        "load_average": [round(x, 2) for x in load],
        "platform": sys.platform,
    }
