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
    gate_errors: Callable[[Job], list[Diag] | None],
    probes: ProbeService,
    checkpoints: Callable[[str], CheckpointRecord | None] = lambda job_id: None,
    root: Path | None = None,
) -> list[dict[str, Any]]:
    """The contract's ``JobInfo`` for every job id in the manifest.

    ``gate_errors`` is the workspace's ``TrainerGates.known_errors``: None while the trainer has
    no verdict yet, and the job is then listed with ``gatesPending`` and a "still checking"
    finding, never runnable; ``checkpoints`` the job's last checkpoint across its runs
    (``Supervisor.job_checkpoint``).
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
                    "gatesPending": False,
                }
            )
            continue
        errors = gate_errors(job) if job.kind == "train" else []
        pending = errors is None
        if errors is None:
            errors = [still_checking(job, root or Path("."))]
        blocked = [d.to_wire() for d in errors]
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
                "gatesPending": pending,
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
        judged: Callable[[], None] = lambda: None,
    ) -> None:
        self.gates = gates
        self.judged = judged
        """Called (from the batch's thread) when a batch of lints ends: what was listed as still
        being checked is stale."""
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

    def build(self, manifest: ManifestResult, *, judged: bool = False) -> list[dict[str, Any]]:
        """The list as it is now: the list made again if its key changed, each job's
        ``lastCheckpoint`` read (a worker thread's job).

        It never waits for the gates (issues 38 and 39): the trainers new or changed are linted
        in a thread of their own (``judge``), one batch at a time, and a job whose trainer has no
        verdict yet is listed with ``gatesPending`` and a "still checking" finding, not runnable
        (a start judges the trainer itself, ``TrainerGates.verdict``). ``judge`` tells when the
        batch ends, so that the client can be told to ask again. ``judged``: wait for the verdicts
        first (``arena.showBlocked``: a person asked what blocks a job, and a lint it is)."""
        batch = self.judge(manifest)
        for _ in range(JUDGED_ROUNDS if judged else 0):
            if batch is None:
                break
            batch.wait()
            batch = self.judge(manifest)
        with self._lock:
            pending = self.gates.pending(manifest)
            key = (self.gates.signature(manifest), self.probes.signature(), pending)
            built = self._built
            if built is None or built[0] is not manifest or built[1] != key:
                infos = job_infos(manifest, self.gates.known_errors, self.probes, root=self.gates.root)
                built = self._built = (manifest, key, infos)
            infos = self._with_checkpoints(built[2])
            self._latest = infos
            return infos

    def judge(self, manifest: ManifestResult) -> threading.Event | None:
        """Begin linting ``manifest``'s trainers not linted yet (unless a batch runs already); the
        batch's end, or None when every trainer has its verdict."""
        with self._warm_lock:
            warmer = self._warmer
            if warmer is not None and not warmer.done.is_set():
                return warmer.done
            missing = self.gates.missing(manifest)
            if not missing:
                return None
            warmer = self._warmer = _Warmer(time.monotonic(), threading.Event())

            def lint() -> None:
                try:
                    self.gates.warm(missing)
                finally:
                    warmer.done.set()
                    self.judged()

            threading.Thread(target=lint, name="gates-warm", daemon=True).start()
            return warmer.done

    def _with_checkpoints(self, infos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``lastCheckpoint`` changes with the runs, not the manifest: the per-request pass."""
        return [{**info, "lastCheckpoint": job_checkpoint(self.checkpoints(info["id"]))} for info in infos]


JUDGED_ROUNDS = 3
"""Batches a ``judged`` build waits for (a trainer rewritten during one is judged by the next; one
that cannot be read stays pending rather than hold the caller for ever)."""


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
            "gatesPending": False,
        }
        for stage in manifest.stages
    ]
