"""The VRAM probe's own rules: what a probe run is, and how its samples are judged.

A probe is a variant of a start (``Supervisor.start`` with ``StartRequest.probe``):
the job with its ``probe.args`` (the job's own args when it has none), run
as job ``<id>.probe`` so that its checkpoints never become the job's resume
point, with no relaunch. The service that watches one and keeps its verdict
is ``arena_ls.lifecycle.probe_service``.

A probe passes when the run ended by itself with exit 0 and its peak stayed
within ``probe.maxVramMb``. Without a readable GPU the probe cannot measure,
says so, and fails, unless the setting ``probe.allowWithoutGpu`` waives that
(CPU-only machines).
"""

from __future__ import annotations

import attrs

from arena_ls.lifecycle.probe_id import PROBE_SUFFIX
from arena_ls.manifest import Job
from arena_ls.run.states import RunStatus


def probe_job(job: Job) -> Job:
    """The job a probe of ``job`` runs: its probe args, its own id and name, no relaunch."""
    return attrs.evolve(
        job,
        id=job.id + PROBE_SUFFIX,
        name=f"{job.display_name} (probe)",
        args=job.probe_args if job.probe_args is not None else job.args,
        max_restarts=0,
    )


@attrs.define
class Peak:
    """What the samples of one probe found."""

    peak_mb: int | None = None
    gpu_error: str | None = None
    samples: int = 0

    def add(self, used_mb: int | None, error: str | None) -> None:
        self.samples += 1
        if used_mb is not None:
            self.peak_mb = max(self.peak_mb or 0, used_mb)
        elif error:
            self.gpu_error = error


def verdict(
    *, status: str, failure: str | None, peak: Peak, limit_mb: int, allow_without_gpu: bool
) -> tuple[bool, str]:
    """(ok, message) of a finished probe."""
    if status != RunStatus.SUCCEEDED.value:
        why = f" ({failure})" if failure else ""
        return False, f"the probe run ended {status}{why}: fix that and probe again"
    if peak.peak_mb is None:
        reason = peak.gpu_error or "no GPU"
        if allow_without_gpu:
            return True, f"no GPU could be read ({reason}); waived by the setting probe.allowWithoutGpu"
        return False, (
            f"no GPU could be read ({reason}): the probe cannot measure VRAM; on a CPU-only "
            "machine set probe.allowWithoutGpu to waive it"
        )
    if peak.peak_mb > limit_mb:
        return False, (
            f"peak {peak.peak_mb} MB is above the {limit_mb} MB limit (probe.maxVramMb): the long run "
            "would spill to shared memory and run about 3x slower; use a smaller micro-batch"
        )
    if peak.peak_mb == 0:
        return True, "the probe's processes held no GPU memory (did it run on the CPU?)"
    return True, f"peak {peak.peak_mb} MB, within the {limit_mb} MB limit"
