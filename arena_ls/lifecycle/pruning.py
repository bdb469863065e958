"""Deleting the runs a workspace no longer keeps (``Supervisor.prune``), on a worker thread.

The finished runs past the newest ``keep`` go first, then the oldest ones whose logs take the
workspace past ``logs.keepRunsMb`` (``retention.runs_over_budget``, the pure policy). A run still
running, or damaged, is never deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable

from arena_ls.lifecycle.retention import FinishedRun, is_log_file, runs_over_budget
from arena_ls.lifecycle.runview import RunView


def prune_history(
    newest_first: list[str],
    followed: dict[str, RunView],
    read_view: Callable[[str], RunView | None],
    keep: int,
    budget: int,
) -> list[str]:
    """Delete the finished runs past the newest ``keep`` finished ones, then those the log budget
    gives up (files only); the ids deleted. Runs no view follows are read with ``read_view``."""
    doomed: list[str] = []
    kept: dict[str, RunView] = {}
    for run_id in newest_first:
        view = followed.get(run_id) or read_view(run_id)
        if view is None or not view.is_final or view.damage is not None:
            continue
        if len(kept) < keep:
            kept[run_id] = view
            continue
        shutil.rmtree(view.run_dir.path, ignore_errors=True)
        doomed.append(run_id)
    for run_id in runs_over_budget([_finished_run(view) for view in kept.values()], budget):
        shutil.rmtree(kept[run_id].run_dir.path, ignore_errors=True)
        doomed.append(run_id)
    return doomed


def _finished_run(view: RunView) -> FinishedRun:
    """A finished run as the log budget sees it (its log files' sizes on disk)."""
    sizes = []
    with contextlib.suppress(OSError), os.scandir(view.run_dir.path) as entries:
        for entry in entries:
            if is_log_file(entry.name):
                with contextlib.suppress(OSError):
                    sizes.append(entry.stat().st_size)
    return FinishedRun(view.run_id, view.spec.job_id, view.spec.created_at, sum(sizes))
