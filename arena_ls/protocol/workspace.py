"""One workspace as the server sees it: its services, shaped into the contract's objects.

Handlers call this façade. The services themselves (supervisor, manifest,
gates, health, insights) are composed in ``services.workspace``, which has
no LSP in it; this layer adds the probe and the ``JobInfo`` list, and shapes
results into the contract's objects (``JobInfo``, ``RunInfo``, the status
result). It knows the server only as a ``WorkspaceListener``: what it tells
the client, never how.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from arena_ls.cluster.config import declared_targets
from arena_ls.health import Hardware
from arena_ls.lifecycle.backends.base import Backends
from arena_ls.lifecycle.probe_service import ProbeService
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.starter import DryRun, StartRequest
from arena_ls.lifecycle.stopper import StopRequest
from arena_ls.manifest import ManifestResult
from arena_ls.protocol import wire
from arena_ls.protocol.configuration import Configuration
from arena_ls.protocol.jobs import JobInfos
from arena_ls.protocol.metrics_request import MetricsCursor, metrics_answer
from arena_ls.protocol.params import DEFAULT_RUNS
from arena_ls.protocol.rpc.preencoded import PreEncoded
from arena_ls.protocol.tasks import TaskRunner
from arena_ls.services.workspace import WorkspaceListener, WorkspaceServices
from arena_ls.settings import Settings

__all__ = ["Workspace", "WorkspaceListener"]

log = logging.getLogger(__name__)

STATUS_LOG_LINES = 50
ENDED_INFOS_KEPT = 256
FEW_RUN_INFOS = 64
"""Below this an answer is made on the loop (1-2 ms): fewer ended runs to shape (a status's 50)
than this, or fewer runs and jobs to encode (``encoded_if_long``); from it on, on a worker."""


class Workspace(WorkspaceServices):
    """The workspace behind one server."""

    def __init__(
        self,
        root: Path,
        configuration: Configuration,
        listener: WorkspaceListener,
        hardware: Hardware,
        tasks: TaskRunner,
        backends: Backends,
    ) -> None:
        self.configuration = configuration
        super().__init__(root, lambda: configuration.settings, listener, hardware, tasks, backends)
        self.probes = ProbeService(self.supervisor, hardware, self.settings, listener, tasks)
        self.jobs = JobInfos(self.gates, self.probes, self.supervisor.job_checkpoint, self._verdicts_in)
        self._ended_infos: dict[str, tuple[Any, dict[str, Any]]] = {}
        self.tasks = tasks
        self._loop: asyncio.AbstractEventLoop | None = None
        """The event loop, once a request ran on it (a batch of verdicts tells it when it ends)."""
        self._unsubscribe = configuration.subscribe(self._settings_changed)

    # -- lifetime --------------------------------------------------------------------------

    async def close(self) -> None:
        self._unsubscribe()
        await self.insights.close()
        await self.probes.close()
        await self.supervisor.close()
        await asyncio.to_thread(self.health.close)
        await asyncio.to_thread(self.gate_budget.close)

    def _settings_changed(self, settings: Settings) -> None:
        self.supervisor.wake()

    # -- requests --------------------------------------------------------------------------

    async def start_job(self, request: StartRequest) -> dict[str, Any]:
        if request.probe:
            started: RunView | DryRun = await self.probes.start(request)
        else:
            admit = None if request.dry_run else self.probes.require
            started = await self.supervisor.start(request, admit=admit)
        self.listener.active_changed()
        if isinstance(started, DryRun):
            return wire.dry_run(started)
        return self._answer(started)

    async def stop_run(self, request: StopRequest) -> dict[str, Any]:
        view = await self.supervisor.stop(request)
        return self._answer(view, tail=True) if view is not None else wire.nothing_stopped()

    def _answer(self, view: RunView, *, tail: bool = False) -> dict[str, Any]:
        """A ``RunInfo`` answered to a request: with its ``insights`` (contract 6.3), not its GPU use."""
        extra: dict[str, Any] = {"insights": self.insights.wire(view)}
        if tail:
            extra["tail"] = wire.tail(view)
        return self._with_after_reboot(view, wire.run_info(view, extra))

    def _with_after_reboot(self, view: RunView, info: dict[str, Any]) -> dict[str, Any]:
        """``afterReboot`` of a run a restart of the machine interrupted (read now: its offer goes
        once it is resumed, and follows ``watchdog.afterReboot``)."""
        offer = self.supervisor.after_reboot(view)
        if offer is not None:
            info["afterReboot"] = offer.to_wire()
        return info

    def run_info(self, view: RunView) -> dict[str, Any]:
        """The ``RunInfo`` of a notification or the status: with its GPU use and its insights.

        An ended run's is kept (``ENDED_INFOS_KEPT`` of them) until its state file changes: a
        status lists 50 of them several times a second, and they no longer change."""
        if not view.is_final:
            return wire.run_info(view, {**self._gpu_extras(view), "insights": self.insights.wire(view)})
        key = (view.state_signature, view.damage, view.status, view.disk_full)
        kept = self._ended_infos.pop(view.run_id, None)
        info = kept[1] if kept is not None and kept[0] == key else wire.run_info(view, {"insights": []})
        self._ended_infos[view.run_id] = (key, info)
        while len(self._ended_infos) > ENDED_INFOS_KEPT:
            del self._ended_infos[next(iter(self._ended_infos))]
        return self._with_after_reboot(view, dict(info))

    def _gpu_extras(self, view: RunView) -> dict[str, Any]:
        """``gpuMemoryMb`` and ``gpuUtilization`` of a live run's process tree (absent without a GPU)."""
        use = self.gpu_use(view)
        if use is None:
            return {}
        memory, utilization = use
        return {"gpuMemoryMb": memory, "gpuUtilization": utilization}

    def gpu_text(self, view: RunView) -> str:
        """``GPU 3100 MB 87%`` for a run on a GPU, else nothing."""
        extras = self._gpu_extras(view)
        if not extras:
            return ""
        return f"GPU {extras['gpuMemoryMb']} MB {extras['gpuUtilization']:.0f}%"

    def health_wire(self, manifest: ManifestResult) -> dict[str, Any]:
        """This machine's health, and an entry per cluster ``manifest`` declares.

        Both are sampled in the background: the answer never waits for NVML or a cluster.
        """
        targets = declared_targets(manifest.clusters, self.settings())
        clusters = [health.to_wire() for health in self.cluster_health.latest(targets)]
        return {**self.health.wire(), "clusters": clusters}

    async def job_infos(
        self, manifest: ManifestResult | None = None, *, judged: bool = False
    ) -> list[dict[str, Any]]:
        """``JobInfo`` of every job of the manifest (as it is on disk unless given), built in a
        worker thread (``JobInfos``: the trainers new or changed are judged meanwhile; with
        ``judged``, before the list is made)."""
        self._loop = asyncio.get_running_loop()
        current = manifest or await self.manifest_async()
        return await asyncio.to_thread(lambda: self.jobs.build(current, judged=judged))

    async def start_up_work(self) -> None:
        """What a session begins once its first status is answered (``warmup.FirstStatus``): the
        GPUs' first reading, on the health sampler's thread, and the trainers' first verdicts."""
        self.health.read_gpus_now()
        await self.judge_trainers()

    async def judge_trainers(self) -> None:
        """Begin the gates' verdicts on the manifest's trainers at start-up, before anything asks:
        a person who opens the editor and presses Run a second later finds them judged (a status
        never waits for them; one asked sooner lists them ``gatesPending``)."""
        self._loop = asyncio.get_running_loop()
        manifest = await self.manifest_async()
        await asyncio.to_thread(self.jobs.judge, manifest)

    def _verdicts_in(self) -> None:
        """A batch of the gates' verdicts ended (the batch's thread): what a status or a lens
        listed as still being checked is stale, and the client is told (``active_changed``)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self.listener.active_changed)

    def _read_for_status(self, manifest: ManifestResult) -> list[dict[str, Any]]:
        """A status's reading of files, on a worker thread: the runs folder's listing if it
        changed (5,000 runs: 10 ms of CPU) and the job list (``JobInfos.build``)."""
        self.supervisor.list_history()
        return self.jobs.build(manifest)

    async def status(self, runs_limit: int = DEFAULT_RUNS) -> dict[str, Any] | PreEncoded:
        """The contract's status; ``runs`` holds the newest ``runs_limit`` runs, oldest first as
        before (contract 7.2 adds ``runsTotal``; ``arena/runs`` pages through the rest)."""
        self._loop = asyncio.get_running_loop()
        manifest = await self.manifest_async()
        jobs = await asyncio.to_thread(self._read_for_status, manifest)
        supervisor = self.supervisor
        supervisor.scan(list_folder=False)
        supervisor.poll_recent()
        active = supervisor.active_view()
        runs = await self.newest_views(runs_limit)
        shown = active or supervisor.latest_view()
        answer = {
            "active": self.run_info(active) if active else None,
            "runs": await self.run_infos(runs[::-1]),
            "runsTotal": supervisor.runs_total(),
            "jobs": jobs,
            "health": self.health_wire(manifest),
            "logs": wire.tail(shown, STATUS_LOG_LINES) if shown else [],
            "deviceProfile": self.health.device_profile(),
        }
        return await self.encoded_if_long(answer, len(runs) + len(jobs))

    async def runs_page(self, before: str | None, limit: int) -> dict[str, Any] | PreEncoded:
        """``arena/runs {before?, limit?}``: ``{runs, next}``, newest first; ``next`` is the
        ``before`` of the page after it (null after the oldest run)."""
        await asyncio.to_thread(self.supervisor.list_history)
        self.supervisor.scan(list_folder=False)
        key = self.runs_key(before) if before is not None else None
        views = await self.newest_views(limit + 1, key)
        shown = views[:limit]
        more = len(views) > limit
        return await self.encoded_if_long(
            {
                "runs": await self.run_infos(shown),
                "next": shown[-1].run_id if more and shown else None,
            },
            len(shown),
        )

    async def encoded_if_long(self, answer: dict[str, Any], runs: int) -> dict[str, Any] | PreEncoded:
        """An answer listing ``FEW_RUN_INFOS`` runs or more, written as JSON on a worker thread
        (``PreEncoded``: pygls's encoding of 700 RunInfos took the loop 11-12 ms)."""
        if runs < FEW_RUN_INFOS:
            return answer
        return await asyncio.to_thread(PreEncoded.of, answer)

    async def run_infos(self, views: list[RunView]) -> list[dict[str, Any]]:
        """``run_info`` of each view; a page's ended runs are shaped on a worker thread (700 of
        them took the loop 12-16 ms; an ended run's files no longer change), the rest here."""
        ended = [view for view in views if view.is_final and view.run_id not in self._ended_infos]
        if len(ended) < FEW_RUN_INFOS:
            return [self.run_info(view) for view in views]
        shaped = await asyncio.to_thread(
            lambda: {v.run_id: wire.run_info(v, {"insights": []}) for v in ended}
        )
        return [
            self._with_after_reboot(view, dict(shaped[view.run_id]))
            if view.run_id in shaped
            else self.run_info(view)
            for view in views
        ]

    async def logs(self, run_id: str | None, cursor: str | None, limit: int) -> dict[str, Any]:
        return wire.logs_page(await self.supervisor.logs_async(run_id, cursor, limit))

    async def metrics(
        self, run_id: str | None, limit: int, cursor: MetricsCursor | None = None
    ) -> dict[str, Any] | PreEncoded:
        """A page of ``arena/metrics`` (pass the answer's ``runId`` with its ``next``)."""
        view = self.shown_view(run_id)
        if view is None:
            return {"runId": None, "points": [], "checkpoints": [], "evals": [], "next": None}
        return await metrics_answer(view, cursor, limit)
