"""The VRAM probe: a short run of a job that measures the peak GPU memory of its processes.

``arena/start {id, probe: true}`` runs the job with its ``probe.args`` (the
job's own args when it has none) as a run of job ``<id>.probe`` (so that its
checkpoints never become the job's resume point), with no relaunch. While it
runs, the GPU memory of its own processes is read through the injected
hardware interface every ``probe.sampleSeconds``. When it ends, the verdict
``{ok, peakVramMb, at, message}`` is recorded in ``<stateDir>/probes/<id>.json``
under a hash of the trainer's content at the probe's launch, and shown as
``JobInfo.probe`` while the trainer is unchanged. A job with
``probe.required`` is refused (1010 ``probe-required``) until a probe of its
current trainer passed.

A probe passes when the run ended by itself with exit 0 and its peak stayed
within ``probe.maxVramMb``. Without a readable GPU the probe cannot measure,
says so, and fails, unless the setting ``probe.allowWithoutGpu`` waives that
(CPU-only machines).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from arena_ls.diagnostics import Diag
from arena_ls.errors import (
    APPROVAL_REQUIRED,
    DISABLED,
    PROBE_REQUIRED,
    ArenaError,
)
from arena_ls.health import Hardware, process_tree_pids
from arena_ls.lifecycle import supervisor_events
from arena_ls.lifecycle.rundir import write_json_atomic
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.states import RunStatus
from arena_ls.lifecycle.supervisor import DryRun, StartRequest, Supervisor
from arena_ls.lifecycle.supervisor_events import SupervisorEvent
from arena_ls.manifest import Job
from arena_ls.protocol.insights import PROBE_SUFFIX
from arena_ls.protocol.tasks import TaskRunner
from arena_ls.settings import Settings
from arena_ls.timeutil import iso_utc

log = logging.getLogger(__name__)

KEEP_RESULTS = 20
"""Verdicts kept per job (one per trainer version)."""


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


class ProbeListener(Protocol):
    """What the probe service tells the server."""

    def lifecycle(self, view: RunView, event: SupervisorEvent) -> None: ...
    def active_changed(self) -> None: ...


class ProbeService:
    """Runs probes and keeps their verdicts."""

    def __init__(
        self,
        supervisor: Supervisor,
        hardware: Hardware,
        settings: Callable[[], Settings],
        listener: ProbeListener,
        tasks: TaskRunner,
    ) -> None:
        self.supervisor = supervisor
        self.hardware = hardware
        self.settings = settings
        self.listener = listener
        self.tasks = tasks
        self.watching: set[asyncio.Task[None]] = set()
        """The probes being watched (cancelled when the workspace closes)."""

    # -- verdicts on disk -----------------------------------------------------------------

    def _path(self, job: Job) -> Path:
        return self.supervisor.folder.root / "probes" / f"{job.id}.json"

    def trainer_hash(self, job: Job) -> str:
        """A hash of what the probe judges: the trainer's content (and the probe's limit)."""
        digest = hashlib.sha256(f"{job.probe_max_vram_mb}\0".encode())
        script = job.resolved_script(self.supervisor.root)
        try:
            digest.update(script.read_bytes() if script is not None else b"")
        except OSError:
            digest.update(b"unreadable")
        return digest.hexdigest()

    def signature(self) -> tuple[int, int] | None:
        """Changes when a verdict is recorded (each is written by a rename into the folder)."""
        try:
            stat = os.stat(self.supervisor.folder.root / "probes")
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_ino)

    def _read(self, job: Job) -> dict[str, Any]:
        try:
            data = json.loads(self._path(job).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def info(self, job: Job) -> dict[str, Any] | None:
        """``JobInfo.probe``: the verdict for the trainer as it is now, or None."""
        results = self._read(job)
        if not results:  # no probe ever ran: the trainer is not read (status asks for every job)
            return None
        result = results.get(self.trainer_hash(job))
        return result if isinstance(result, dict) else None

    def _record(self, job: Job, digest: str, result: dict[str, Any]) -> None:
        results = self._read(job)
        results.pop(digest, None)
        results[digest] = result
        kept = dict(list(results.items())[-KEEP_RESULTS:])
        path = self._path(job)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, kept)

    # -- the gate on starts ---------------------------------------------------------------

    def require(self, job_id: str) -> None:
        """Refuse (1010) a job with ``probe.required`` whose current trainer has no passing probe."""
        job, _ = self.supervisor.resolve_job(job_id)
        if not job.probe_required or job.status == "disabled":
            return
        probe = self.info(job)
        if probe is not None and probe.get("ok") is True:
            return
        why = (
            "no probe of its current trainer"
            if probe is None
            else f"its last probe failed: {probe.get('message')}"
        )
        raise ArenaError(
            PROBE_REQUIRED,
            f"job {job.id!r} needs a passing VRAM probe first ({why}); run arena/start with probe: true",
            probe=probe,
        )

    # -- running one ----------------------------------------------------------------------

    async def start(self, request: StartRequest) -> RunView | DryRun:
        """Start the probe run of a job; its verdict is recorded when it ends.

        With ``dryRun`` nothing starts: the answer is the probe's command line
        and what the gates and pre-flight say of it (contract 4.2).
        """
        supervisor = self.supervisor
        job, _ = supervisor.resolve_job(request.id)
        if job.status == "disabled":
            raise ArenaError(DISABLED, f"job {job.id!r} is disabled in the manifest")
        probe_job = attrs.evolve(
            job,
            id=job.id + PROBE_SUFFIX,
            name=f"{job.display_name} (probe)",
            args=job.probe_args if job.probe_args is not None else job.args,
            max_restarts=0,
        )
        if request.dry_run:
            return await supervisor.dry_run(
                probe_job, supervisor.trainer_argv(probe_job), self._gate_errors(job)
            )
        if job.status == "approval-required" and request.approved is not True:
            raise ArenaError(
                APPROVAL_REQUIRED, f"job {job.id!r} needs approval: probe it with approved: true"
            )
        await supervisor._refuse_if_active()
        gate_errors = self._gate_errors(job)
        cluster_check = await supervisor.check_cluster(job) if not gate_errors else None
        warnings = supervisor.refuse_if_unsafe(job, gate_errors, cluster_check)
        digest = self.trainer_hash(job)
        view = await supervisor._launch(probe_job, None)
        for warning in warnings:
            supervisor.listener.lifecycle(view, supervisor_events.warning(warning))
        started = await supervisor._await_started(view)
        task = self.tasks.run_task(self._watch(view, job, digest), f"watching the probe of {job.id}")
        self.watching.add(task)
        task.add_done_callback(self.watching.discard)
        return started

    def _gate_errors(self, job: Job) -> list[Diag]:
        """The trainer's error-severity gate results: a probe is refused on them as a start is (1004)."""
        checker = self.supervisor.gate_checker
        return checker(job) if checker is not None and job.kind == "train" else []

    async def _watch(self, view: RunView, job: Job, digest: str) -> None:
        peak = Peak()
        settings = self.settings().probe
        hardware = self.hardware
        try:
            while not view.is_final:
                pid = view.state.pid if view.state is not None else None
                if pid:
                    reading = await asyncio.to_thread(hardware.gpus)
                    pids = process_tree_pids([pid])
                    peak.add(
                        _used_by(reading, pids), reading.error or (None if reading.gpus else "no GPU found")
                    )
                await asyncio.sleep(settings.sample_seconds)
                view.refresh_state()
                # Whoever re-reads the state announces its change: the supervisor's poll skips a
                # final run whose lines are all read, so the end would otherwise go unannounced.
                self.supervisor.notify_if_changed(view)
            failure = view.state.failure if view.state is not None else None
            ok, message = verdict(
                status=view.status.value,
                failure=f"{failure.kind}: {failure.evidence}" if failure else None,
                peak=peak,
                limit_mb=job.probe_max_vram_mb,
                allow_without_gpu=settings.allow_without_gpu,
            )
            result = {"ok": ok, "peakVramMb": peak.peak_mb, "at": iso_utc(time.time()), "message": message}
            self._record(job, digest, result)
            log.info("probe of %s: %s", job.id, message)
            self.listener.lifecycle(
                view, supervisor_events.note(f"probe {'passed' if ok else 'failed'}: {message}")
            )
            self.listener.active_changed()
        except Exception:
            log.exception("watching the probe of %s failed", job.id)

    async def close(self) -> None:
        for task in list(self.watching):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _used_by(reading: Any, pids: set[int]) -> int | None:
    """MB of GPU memory ``pids`` hold across every GPU; None when no GPU could be read."""
    if not reading.gpus:
        return None
    return sum(p.used_memory_mb or 0 for gpu in reading.gpus for p in gpu.processes if p.pid in pids)
