"""How a probe run is named: its job's id plus ``PROBE_SUFFIX`` (its checkpoints never resume the job)."""

from __future__ import annotations

PROBE_SUFFIX = ".probe"
"""A probe run's job id is its job's id plus this (its checkpoints never resume the job)."""


def job_of(run_job_id: str) -> str:
    """The manifest job a run belongs to (a probe run's, too)."""
    return run_job_id.removesuffix(PROBE_SUFFIX)
