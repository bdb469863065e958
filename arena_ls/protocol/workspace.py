"""One workspace as the server sees it: supervisor, manifest, gates and health together.

Handlers call this façade; it composes the plain modules and shapes their
results into the contract's objects (``JobInfo``, ``RunInfo``, the status
result). It knows the server only as a ``WorkspaceListener``: what it tells
the client, never how.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Protocol

from arena_ls import platform
from arena_ls.cluster.config import declared_targets
from arena_ls.cluster.health import ClusterHealthSampler
from arena_ls.diagnostics import Severity
from arena_ls.health import Hardware
from arena_ls.health.service import HealthService, Preflight
from arena_ls.insights.model import Insight
from arena_ls.lifecycle.follower import Listener
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.supervisor import DryRun, StartRequest, StopRequest, Supervisor
from arena_ls.manifest import ManifestResult
from arena_ls.protocol import wire
from arena_ls.protocol.configuration import Configuration
from arena_ls.protocol.insights import InsightService
from arena_ls.protocol.jobs import job_infos
from arena_ls.protocol.metrics import RunMetrics
from arena_ls.protocol.probe import ProbeService
from arena_ls.protocol.tasks import TaskRunner
from arena_ls.settings import Settings

log = logging.getLogger(__name__)

STATUS_LOG_LINES = 50


class WorkspaceListener(Listener, Protocol):
    """What the workspace tells the server (the supervisor's listener, and more)."""

    def insights_changed(self, view: RunView, new: list[Insight]) -> None: ...
    def live_trainers_changed(self) -> None: ...
    def active_changed(self) -> None: ...


class Workspace:
    """The workspace behind one server."""

    def __init__(
        self,
        root: Path,
        configuration: Configuration,
        listener: WorkspaceListener,
        hardware: Hardware,
        tasks: TaskRunner,
    ) -> None:
        self.root = root.resolve()
        self.configuration = configuration
        self.listener = listener
        # The gates (arena_ls.gates) and the pre-flight checks (arena_ls.health) are the
        # supervisor's collaborators; what they read of the workspace they read when asked.
        from arena_ls.gates.cache import TrainerGates  # start-up speed: no gates before `initialize`

        self.gates = TrainerGates(self.root, self.manifest, self._fp32_only, self._gate_severities)
        self.preflight = Preflight(hardware, self.settings, root=self.root, state_dir=self._state_dir)
        self.supervisor = Supervisor(
            self.root, self.settings, listener, gate_checker=self.gates.errors, preflight=self.preflight.run
        )
        self.health = HealthService(
            hardware,
            self.settings,
            our_pids=self.supervisor.our_pids,
            active=lambda: self.supervisor.active_view() is not None,
        )
        self.cluster_health = ClusterHealthSampler()
        self.insights = InsightService(self.supervisor, self.health, self.settings, listener, tasks)
        self.probes = ProbeService(self.supervisor, hardware, self.settings, listener, tasks)
        self.metrics_cache = RunMetrics()
        self._unsubscribe = configuration.subscribe(self._settings_changed)

    def settings(self) -> Settings:
        return self.configuration.settings

    def _state_dir(self) -> Path:
        return self.supervisor.folder.root

    def _fp32_only(self) -> bool | None:
        return self.health.fp32_only()

    def _gate_severities(self) -> dict[str, Severity]:
        """AR010 an error on a Windows device, then the workspace's ``gates.severity`` (contract 7.3)."""
        from arena_ls.gates.severity import gate_severities  # start-up speed, as TrainerGates above

        return gate_severities(platform.windows_device(), self.settings().gates_severity)

    # -- lifetime --------------------------------------------------------------------------

    def start(self) -> None:
        """Adopt the runs already in the state folder and follow them."""
        self.supervisor.scan()
        self.supervisor.ensure_polling()
        self.insights.start()
        for view in list(self.supervisor.views.values()):
            if not view.is_final:
                self.supervisor.notify_if_changed(view)

    async def close(self) -> None:
        self._unsubscribe()
        await self.insights.close()
        await self.probes.close()
        await self.supervisor.close()
        await asyncio.to_thread(self.health.close)

    def _settings_changed(self, settings: Settings) -> None:
        self.supervisor.wake()

    # -- requests --------------------------------------------------------------------------

    async def start_job(self, request: StartRequest) -> dict[str, Any]:
        if request.probe:
            started: RunView | DryRun = await self.probes.start(request)
        else:
            if not request.dry_run:
                self.probes.require(request.id)
            started = await self.supervisor.start(request)
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
        return wire.run_info(view, extra)

    def run_info(self, view: RunView) -> dict[str, Any]:
        """The ``RunInfo`` of a notification or the status: with its GPU use and its insights."""
        return wire.run_info(view, {**self._gpu_extras(view), "insights": self.insights.wire(view)})

    def _gpu_extras(self, view: RunView) -> dict[str, Any]:
        """``gpuMemoryMb`` and ``gpuUtilization`` of a live run's process tree (absent without a GPU)."""
        state = view.state
        if state is None or not state.pid or view.is_final:
            return {}
        use = self.health.gpu_use(state.pid)
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

    def manifest(self) -> ManifestResult:
        return self.supervisor.load_manifest()

    def health_wire(self, manifest: ManifestResult) -> dict[str, Any]:
        """This machine's health, and an entry per cluster ``manifest`` declares.

        Both are sampled in the background: the answer never waits for NVML or a cluster.
        """
        targets = declared_targets(manifest.clusters, self.settings())
        clusters = [health.to_wire() for health in self.cluster_health.latest(targets)]
        return {**self.health.wire(), "clusters": clusters}

    def job_infos(self, manifest: ManifestResult | None = None) -> list[dict[str, Any]]:
        """``JobInfo`` of every job of the manifest (as it is on disk unless given)."""
        return job_infos(manifest or self.manifest(), self.gates.errors, self.probes)

    async def status(self) -> dict[str, Any]:
        supervisor = self.supervisor
        supervisor.scan()
        supervisor.poll_once()
        active = supervisor.active_view()
        runs = sorted(supervisor.views.values(), key=lambda v: v.spec.created_at)
        shown = active or supervisor.latest_view()
        manifest = self.manifest()
        return {
            "active": self.run_info(active) if active else None,
            "runs": [self.run_info(v) for v in runs],
            "jobs": self.job_infos(manifest),
            "health": self.health_wire(manifest),
            "logs": wire.tail(shown, STATUS_LOG_LINES) if shown else [],
            "deviceProfile": self.health.device_profile(),
        }

    async def logs(self, run_id: str | None, cursor: str | None, limit: int) -> dict[str, Any]:
        return wire.logs_page(await self.supervisor.logs_async(run_id, cursor, limit))

    async def metrics(self, run_id: str | None) -> dict[str, Any]:
        view = (
            self.supervisor.view_for(run_id)
            if run_id
            else (self.supervisor.active_view() or self.supervisor.latest_view())
        )
        if view is None:
            return {"runId": None, "points": [], "checkpoints": []}
        return await self.metrics_cache.wire(view)
