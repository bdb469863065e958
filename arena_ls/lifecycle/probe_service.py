"""The VRAM probe service: starts a probe (a variant of a start), watches it, keeps its verdict.

``arena/start {id, probe: true}`` is ``Supervisor.start`` with ``probe`` set:
the same refusals as a start, the run of job ``<id>.probe`` (``lifecycle/probe.py``).
While it runs, the GPU memory of its own processes is read through the injected
hardware interface every ``probe.sampleSeconds``. When it ends, the verdict
``{ok, peakVramMb, at, message}`` is recorded in ``<stateDir>/probes/<id>.json``
under a hash of the trainer's content at the probe's launch, and shown as
``JobInfo.probe`` while the trainer is unchanged. A job with
``probe.required`` is refused (1010 ``probe-required``) until a probe of its
current trainer passed.

It knows nothing of LSP (it lived in ``protocol/`` once): the server hands
it the hardware and a way to run background tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

import attrs

from arena_ls.errors import PROBE_REQUIRED, ArenaError
from arena_ls.health import Hardware, process_tree_pids
from arena_ls.lifecycle.probe import Peak, verdict
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.starter import DryRun, StartRequest
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.manifest import Job
from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import write_json_atomic
from arena_ls.settings import Settings
from arena_ls.timeutil import iso_utc

log = logging.getLogger(__name__)

KEEP_RESULTS = 20
"""Verdicts kept per job (one per trainer version)."""


class BackgroundTasks(Protocol):
    """Runs a coroutine in the background, keeping it until done (``protocol/tasks.TaskRunner``)."""

    def run_task(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]: ...


@attrs.define
class _Launched:
    """The job a probe start launched, and its trainer's hash then (set by ``launching``)."""

    job: Job | None = None
    digest: str = ""


class ProbeListener(Protocol):
    """What the probe service tells the server."""

    def lifecycle(self, view: RunView, event: AgentRecord) -> None: ...
    def active_changed(self) -> None: ...


class ProbeService:
    """Runs probes and keeps their verdicts."""

    def __init__(
        self,
        supervisor: Supervisor,
        hardware: Hardware,
        settings: Callable[[], Settings],
        listener: ProbeListener,
        tasks: BackgroundTasks,
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

    def require(self, job: Job) -> None:
        """Refuse (1010) a job with ``probe.required`` whose current trainer has no passing probe
        (``Supervisor.start``'s ``admit``: told the job of the request's manifest snapshot)."""
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
        """Start the probe run of a job (``Supervisor.start`` with ``probe``); its verdict is
        recorded when it ends.

        With ``dryRun`` nothing starts: the answer is the probe's command line
        and what the gates and pre-flight say of it (contract 4.2).
        """
        launched = _Launched()

        def launching(job: Job) -> None:
            launched.job, launched.digest = job, self.trainer_hash(job)

        started = await self.supervisor.start(attrs.evolve(request, probe=True), launching=launching)
        if isinstance(started, RunView) and launched.job is not None:
            job = launched.job
            task = self.tasks.run_task(
                self._watch(started, job, launched.digest), f"watching the probe of {job.id}"
            )
            self.watching.add(task)
            task.add_done_callback(self.watching.discard)
        return started

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
                view, agent_records.note(f"probe {'passed' if ok else 'failed'}: {message}")
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
