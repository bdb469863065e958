"""Which finished runs' logs a workspace keeps: ``logs.keepRunsMb`` (contract 7.1).

All finished runs' logs of a workspace together use at most the budget: the
oldest runs go first, and the last run of each job is always kept (it is what
``arena status``, the code lens and a relaunch look at), even when it alone is
over the budget. A pure policy: the caller measures the runs and deletes.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

LOG_FILES = ("output.log", "output.idx")
"""The files of a run's captured output (what the budget counts)."""


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
