"""``JobInfo``: each manifest job, whether it can run, and what blocks it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arena_ls.diagnostics import Diag
from arena_ls.lifecycle.rundir import CheckpointRecord
from arena_ls.manifest import Job, ManifestResult
from arena_ls.protocol.probe import ProbeService
from arena_ls.protocol.wire import job_checkpoint


def job_infos(
    manifest: ManifestResult,
    gate_errors: Callable[[Job], list[Diag]],
    probes: ProbeService,
    checkpoints: Callable[[str], CheckpointRecord | None] = lambda job_id: None,
) -> list[dict[str, Any]]:
    """The contract's ``JobInfo`` for every job id in the manifest.

    ``gate_errors`` is the workspace's ``TrainerGates.errors`` (the gates load on first use);
    ``checkpoints`` the job's last checkpoint across its runs (``Supervisor.job_checkpoint``).
    """
    infos: list[dict[str, Any]] = []
    for job_id in manifest.all_ids:
        job = manifest.jobs.get(job_id)
        if job is None:
            blocked = [d.to_wire() for d in manifest.job_diagnostics.get(job_id, ()) if d.is_error]
            infos.append(
                {
                    "id": job_id,
                    "name": job_id,
                    "kind": None,
                    "status": None,
                    "runnable": False,
                    "blockedBy": blocked,
                    "probe": None,
                    "lastCheckpoint": job_checkpoint(checkpoints(job_id)),
                }
            )
            continue
        blocked = [d.to_wire() for d in gate_errors(job)] if job.kind == "train" else []
        infos.append(
            {
                "id": job.id,
                "name": job.display_name,
                "kind": job.kind,
                "status": job.status,
                "runnable": job.status != "disabled" and not blocked,
                "blockedBy": blocked,
                "probe": probes.info(job),
                "lastCheckpoint": job_checkpoint(checkpoints(job.id)),
            }
        )
    return infos
