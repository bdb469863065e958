"""``JobInfo``: each manifest job, whether it can run, and what blocks it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arena_ls.diagnostics import Diag
from arena_ls.manifest import Job, ManifestResult
from arena_ls.protocol.probe import ProbeService


def job_infos(
    manifest: ManifestResult, gate_errors: Callable[[Job], list[Diag]], probes: ProbeService
) -> list[dict[str, Any]]:
    """The contract's ``JobInfo`` for every job id in the manifest.

    ``gate_errors`` is the workspace's ``TrainerGates.errors`` (the gates load on first use).
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
            }
        )
    infos.extend(stage_infos(manifest))
    return infos


def stage_infos(manifest: ManifestResult) -> list[dict[str, Any]]:
    """The manifest's ``stages`` (contract 7.3) as JobInfo: status ``stage``, never runnable."""
    return [
        {
            "id": stage.id,
            "name": stage.name,
            "kind": None,
            "status": "stage",
            "runnable": False,
            "blockedBy": [stage.diagnostic.to_wire()],
            "probe": None,
        }
        for stage in manifest.stages
    ]
