"""Which finished runs' logs a workspace keeps: ``logs.keepRunsMb`` (contract 7.1).

All finished runs' logs of a workspace together use at most the budget: the
oldest runs go first, and the last run of each job is always kept (it is what
``arena status``, the code lens and a relaunch look at), even when it alone is
over the budget. A pure policy: the caller measures the runs and deletes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import attrs

LOG_FILES = ("output.log", "output.idx")
"""The files of a run's captured output while it is under ``logs.maxRunMb`` (its head)."""
_CAPPED_LOG = re.compile(r"output\.(?:t\d+\.(?:log|idx)|mid\.(?:log|idx)|segments\.json)")


def is_log_file(name: str) -> bool:
    """Whether a run folder's file ``name`` is part of its captured output (what the budget counts):
    the head, and a capped log's tail segments, middle and segment table (``logsegments``)."""
    return name in LOG_FILES or _CAPPED_LOG.fullmatch(name) is not None


@attrs.frozen
class FinishedRun:
    """What the policy needs of a finished run."""

    run_id: str
    job_id: str
    created_at: float
    log_bytes: int


def runs_over_budget(runs: Sequence[FinishedRun], budget_bytes: float) -> list[str]:
    """The runs to delete, oldest first, until the rest fit ``budget_bytes`` (or only last runs remain)."""
    last_of_job: dict[str, FinishedRun] = {}
    for run in runs:
        known = last_of_job.get(run.job_id)
        if known is None or (run.created_at, run.run_id) > (known.created_at, known.run_id):
            last_of_job[run.job_id] = run
    used = sum(run.log_bytes for run in runs)
    dropped: list[str] = []
    for run in sorted(runs, key=lambda r: (r.created_at, r.run_id)):
        if used <= budget_bytes:
            break
        if last_of_job[run.job_id] is run:
            continue
        dropped.append(run.run_id)
        used -= run.log_bytes
    return dropped
