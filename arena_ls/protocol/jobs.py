"""``JobInfo``: each manifest job, whether it can run, and what blocks it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from arena_ls.agent.resume_args import uses_path
from arena_ls.diagnostics import Diag, Span
from arena_ls.lifecycle.probe_service import ProbeService
from arena_ls.manifest import Job, ManifestResult
from arena_ls.protocol.wire import job_checkpoint
from arena_ls.run.rundir import CheckpointRecord

if TYPE_CHECKING:  # start-up speed: the gates load on first use
    from arena_ls.gates.cache import TrainerGates


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
                    "resumesFromPath": False,
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
                "resumesFromPath": job.kind == "train" and uses_path(job.resume_args),
            }
        )
    infos.extend(stage_infos(manifest))
    return infos


class JobInfos:
    """The ``JobInfo`` list, built again only when what it says can have changed.

    Its key is the parsed manifest (one object per content, from the manifest
    cache), the gates' signature (the device profile and a ``stat`` of each
    distinct trainer) and the probes folder's signature, so a status request
    of a 500-job manifest costs a few ``stat`` calls, not 500 builds. Fields
    that change with the runs (not the manifest) belong in a per-request pass
    over this list, never in its key.

    ``build`` is a worker thread's job, whoever asks: even a list that is
    current costs a ``stat`` per job (``lastCheckpoint``) and a copy of each
    entry, 10 ms of CPU for 500 jobs on a quiet machine and five times that
    on a loaded one; the lints and a new list, 50 ms more (issue 24: nothing
    holds the event loop for 50 ms). The event loop reads only ``latest``.
    """

    def __init__(
        self,
        gates: TrainerGates,
        probes: ProbeService,
        checkpoints: Callable[[str], CheckpointRecord | None] = lambda job_id: None,
    ) -> None:
        self.gates = gates
        self.probes = probes
        self.checkpoints = checkpoints
        """The job's last checkpoint across its runs (``Supervisor.job_checkpoint``)."""
        self._lock = threading.Lock()
        """One build at a time (two status requests may ask at once, each from its thread)."""
        self._built: tuple[ManifestResult, tuple[object, ...], list[dict[str, Any]]] | None = None
        self._warm_lock = threading.Lock()
        self._warmer: _Warmer | None = None
        self._latest: list[dict[str, Any]] | None = None

    def latest(self) -> list[dict[str, Any]] | None:
        """The list ``build`` answered last (None before the first): for the event loop."""
        return self._latest

    def build(self, manifest: ManifestResult) -> list[dict[str, Any]]:
        """The list as it is now: the trainers new or changed linted, the list made again if its
        key changed, each job's ``lastCheckpoint`` read (a worker thread's job).

        The lints run in a thread of their own (``_warm``), one batch at a time; a status waits for
        them at most ``STATUS_GATE_WAIT`` after the batch began, then answers with a "still
        checking" finding for each trainer not linted yet (RUN stays gated): hostile trainers
        (issue 39) take seconds each to check, and status never waits for them all."""
        warmer = self._warm(manifest)
        if warmer is not None:
            warmer.done.wait(max(0.0, warmer.began + STATUS_GATE_WAIT - time.monotonic()))
        with self._lock:
            pending = self.gates.pending(manifest)
            key = (self.gates.signature(manifest), self.probes.signature(), pending)
            built = self._built
            if built is None or built[0] is not manifest or built[1] != key:

                def gate_errors(job: Job) -> list[Diag]:
                    known = self.gates.known_errors(job)
                    return known if known is not None else [still_checking(job, self.gates.root)]

                built = self._built = (manifest, key, job_infos(manifest, gate_errors, self.probes))
            infos = self._with_checkpoints(built[2])
            self._latest = infos
            return infos

    def _warm(self, manifest: ManifestResult) -> _Warmer | None:
        """The batch linting ``manifest``'s trainers not linted yet (started if none runs)."""
        with self._warm_lock:
            warmer = self._warmer
            if warmer is not None and not warmer.done.is_set():
                return warmer
            missing = self.gates.missing(manifest)
            if not missing:
                return None
            warmer = self._warmer = _Warmer(time.monotonic(), threading.Event())

            def lint() -> None:
                try:
                    self.gates.warm(missing)
                finally:
                    warmer.done.set()

            threading.Thread(target=lint, name="gates-warm", daemon=True).start()
            return warmer

    def _with_checkpoints(self, infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``lastCheckpoint`` changes with the runs, not the manifest: the per-request pass."""
        return [{**info, "lastCheckpoint": job_checkpoint(self.checkpoints(info["id"]))} for info in infos]


STATUS_GATE_WAIT = 3.0
"""How long after a batch of lints began a status waits for it (then answers "still checking"): an
ordinary trainer is linted in well under a second even on a loaded machine, so a status answers its
real verdict; fifteen hostile ones take half a minute, and status does not wait for them."""


class _Warmer(NamedTuple):
    began: float
    done: threading.Event


def still_checking(job: Job, root: Path) -> Diag:
    """The finding of a trainer whose lint has not ended yet: RUN stays gated meanwhile."""
    script = job.resolved_script(root)
    return Diag(
        code="AR000",
        message=f"the gates are still checking {job.script}: it cannot run until they pass",
        severity="error",
        span=Span(0, 0, 0, 0),
        path=str(script) if script is not None else "",
    )


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
            "resumesFromPath": False,
        }
        for stage in manifest.stages
    ]
