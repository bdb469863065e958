"""What a job's runs showed of its checkpoints, for the pre-flight's disk check (contract 8.2).

A leaf (attrs only): ``health.preflight`` reads it and ``lifecycle.supervisor`` makes it, and
neither may import the other's floor through it.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class CheckpointHistory:
    """What a job's runs showed of its checkpoints: the pre-flight's disk check counts on it."""

    paths: tuple[str, ...]
    """Every path a run of the job announced (bounded), newest last, as announced."""
    last_step: int
    """The job's last checkpoint's step."""
    total_steps: int | None
    """The last step its latest run announced it goes to; None when unknown."""
