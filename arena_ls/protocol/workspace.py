"""One workspace as the server sees it: supervisor, manifest, gates and health together.

Handlers call this façade; it composes the plain modules and shapes their
results into the contract's objects (``JobInfo``, the status result).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from arena_ls.diagnostics import Diag
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.supervisor import StartRequest, StopRequest, Supervisor
from arena_ls.manifest import Job, ManifestResult
from arena_ls.protocol.insights import InsightService
from arena_ls.protocol.jobs import job_infos
from arena_ls.protocol.metrics import run_metrics
from arena_ls.protocol.probe import ProbeService

if TYPE_CHECKING:
    from arena_ls.protocol.server import ArenaServer

log = logging.getLogger(__name__)

STATUS_LOG_LINES = 50


class Workspace:
    """The workspace behind one server."""

    def __init__(self, server: ArenaServer, root: Path) -> None:
        self.server = server
        self.root = root.resolve()
        self.supervisor = Supervisor(
            self.root,
            lambda: self.server.settings,
            server,
            gate_checker=self.gate_errors,
            preflight=self.preflight,
        )
        self.health = self._make_health()
        self.insights = InsightService(self)
        self.probes = ProbeService(self)

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
        await self.insights.close()
        await self.probes.close()
        await self.supervisor.close()
        closer = getattr(self.health, "close", None)
        if callable(closer):
            await asyncio.to_thread(closer)

    def settings_changed(self) -> None:
        self.supervisor.wake()

    def active_changed(self) -> None:
        """Runnability or the active run changed (lenses refresh from features)."""
        hook = getattr(self.server, "on_active_changed", None)
        if callable(hook):
            hook()

    # -- health and gates (their modules plug in here) ------------------------------------

    def _make_health(self) -> Any:
        from arena_ls.protocol.hardware import make_health_service

        return make_health_service(self)

    def health_wire(self, manifest: ManifestResult | None = None) -> dict[str, Any]:
        """Health, with an entry per cluster ``manifest`` declares (sampled in the background)."""
        result: dict[str, Any] = self.health.wire(manifest.clusters if manifest else None)
        return result

    def gate_errors(self, job: Job) -> list[Diag]:
        """Error-severity gate diagnostics of a job's trainer."""
        from arena_ls.protocol.gating import trainer_gate_errors

        return trainer_gate_errors(self, job)

    def preflight(
        self, job: Job, gate_errors: list[Diag], our_pids: set[int]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        result: tuple[list[dict[str, Any]], list[str]] = self.health.preflight(job, gate_errors, our_pids)
        return result

    # -- requests --------------------------------------------------------------------------

    async def start_job(self, request: StartRequest) -> dict[str, Any]:
        if request.probe:
            result = await self.probes.start(request)
            self.active_changed()
            return self._with_insights(result)
        if not request.dry_run:
            self.probes.require(request.id)
        result = await self.supervisor.start(request)
        self.active_changed()
        return self._with_insights(result)

    async def stop_run(self, request: StopRequest) -> dict[str, Any]:
        return self._with_insights(await self.supervisor.stop(request))

    def _with_insights(self, result: dict[str, Any]) -> dict[str, Any]:
        """A ``RunInfo`` answered by the supervisor gains its ``insights`` (contract 6.3)."""
        view = self.supervisor.views.get(result.get("runId") or "")
        if view is not None:
            result.setdefault("insights", self.insights.wire(view))
        return result

    def run_info(self, view: RunView) -> dict[str, Any]:
        return view.to_wire({**self.health.run_extras(view), "insights": self.insights.wire(view)})

    def manifest(self) -> ManifestResult:
        return self.supervisor.load_manifest()

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
            "jobs": job_infos(self, manifest),
            "health": self.health_wire(manifest),
            "logs": shown.tail(STATUS_LOG_LINES) if shown else [],
            "deviceProfile": self.health.device_profile(),
        }

    def metrics(self, run_id: str | None) -> dict[str, Any]:
        view = (
            self.supervisor.view_for(run_id)
            if run_id
            else (self.supervisor.active_view() or self.supervisor.latest_view())
        )
        if view is None:
            return {"runId": None, "points": [], "checkpoints": []}
        return run_metrics(view)
