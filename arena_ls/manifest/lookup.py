"""The job a request names, looked up in one manifest snapshot: nothing runs that it does not list."""

from __future__ import annotations

from arena_ls.errors import INVALID_MANIFEST, NOT_ALLOWLISTED, ArenaError
from arena_ls.manifest.loader import ManifestResult
from arena_ls.manifest.model import Job


def allowlisted_job(manifest: ManifestResult, job_id: str) -> Job:
    """The job ``job_id`` names in ``manifest`` (the request's snapshot), or the refusal that
    says why it cannot start (1006, 1001)."""
    if manifest.fatal:
        raise ArenaError(
            INVALID_MANIFEST,
            f"the manifest {manifest.path} does not load",
            diagnostics=[d.to_wire() for d in manifest.errors],
        )
    job = manifest.jobs.get(job_id)
    if job is None and job_id in manifest.all_ids:
        diags = [d.to_wire() for d in manifest.job_diagnostics.get(job_id, ()) if d.is_error]
        raise ArenaError(INVALID_MANIFEST, f"job {job_id!r} has errors in the manifest", diagnostics=diags)
    if job is None and any(stage.id == job_id for stage in manifest.stages):
        raise ArenaError(
            NOT_ALLOWLISTED,
            f"{job_id!r} is a stage of the manifest, with no command: turn it into a job (AR115)",
            known=list(manifest.all_ids),
        )
    if job is None:
        raise ArenaError(
            NOT_ALLOWLISTED,
            f"no job {job_id!r} in the manifest",
            known=list(manifest.all_ids),
        )
    return job
