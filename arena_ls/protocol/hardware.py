"""Health and pre-flight for one workspace: the sampler, the checks, the device profile.

The hardware comes from the server (``SystemHardware`` unless a test injects
a fake through ``create_server(hardware=...)``); everything else is real.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from arena_ls.cluster.config import declared_targets
from arena_ls.cluster.health import ClusterHealthSampler
from arena_ls.diagnostics import Diag
from arena_ls.health import (
    Hardware,
    HealthSampler,
    SystemHardware,
    check_to_wire,
    describe_device_profile,
    fp32_only,
    health_to_wire,
    process_tree_pids,
    run_preflight,
)
from arena_ls.lifecycle.runview import RunView
from arena_ls.manifest import Job
from arena_ls.manifest.model import ClusterDecl

if TYPE_CHECKING:
    from arena_ls.protocol.workspace import Workspace

ON_DEMAND_AGE = 1.0
"""Seconds after which a status request triggers a fresh sample (in the background)."""


class HealthService:
    """Samples health in the background and runs the pre-flight checks."""

    def __init__(self, ws: Workspace, hardware: Hardware) -> None:
        self.ws = ws
        self.hardware = hardware
        self.sampler = HealthSampler(hardware, self._our_pids)
        self.clusters = ClusterHealthSampler()
        self._refreshing = threading.Event()

    def _our_pids(self) -> set[int]:
        return self.ws.supervisor.our_pids()

    def wire(self, clusters: dict[str, ClusterDecl] | None = None) -> dict[str, Any]:
        """The latest sample, at once; a sample older than a second is refreshed in the background.

        ``clusters`` (the manifest's) adds one entry per cluster, sampled in
        the background too (``arena_ls.cluster.health``).
        """
        self.sampler.set_active(self.ws.supervisor.active_view() is not None)
        latest = self.sampler.latest()
        age = (datetime.now(timezone.utc) - latest.at).total_seconds()
        if age > ON_DEMAND_AGE and not self._refreshing.is_set():
            self._refreshing.set()
            threading.Thread(target=self._refresh_in_background, daemon=True).start()
        targets = declared_targets(clusters or {}, self.ws.server.settings)
        return {**health_to_wire(latest), "clusters": [c.to_wire() for c in self.clusters.latest(targets)]}

    def _refresh_in_background(self) -> None:
        try:
            self.sampler.refresh()
        finally:
            self._refreshing.clear()

    def fp32_only(self) -> bool | None:
        return fp32_only(self.ws.server.settings.device_fp32_only, self.sampler.latest().gpus)

    def device_profile(self) -> str:
        health = self.sampler.latest()
        return describe_device_profile(
            self.ws.server.settings.device_fp32_only, health.gpus, health.gpu_error
        )

    def preflight(
        self, job: Job, gate_errors: list[Diag], our_pids: set[int]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        settings = self.ws.server.settings
        checks, warnings = run_preflight(
            kind=job.kind,
            hw=self.hardware,
            settings=settings.preflight,
            checkpoint_dir=job.resolved_cwd(self.ws.root),
            state_dir=self.ws.supervisor.folder.root,
            our_pids=our_pids,
            gate_errors=[f"{d.code} {d.message}" for d in gate_errors] if job.kind == "train" else None,
        )
        return [check_to_wire(c) for c in checks], warnings

    def run_extras(self, view: RunView) -> dict[str, Any]:
        """``gpuMemoryMb`` and ``gpuUtilization`` of a run's process tree (null without a GPU)."""
        state = view.state
        if state is None or not state.pid or view.is_final:
            return {}
        health = self.sampler.latest()
        if not health.gpus:
            return {}
        pids = process_tree_pids([state.pid])
        memory = 0
        utilization: float | None = None
        for gpu in health.gpus:
            mine = [p for p in gpu.processes if p.pid in pids]
            if mine:
                memory += sum(p.used_memory_mb or 0 for p in mine)
                utilization = max(utilization or 0.0, float(gpu.utilization or 0))
        if utilization is None:
            return {}
        return {"gpuMemoryMb": memory, "gpuUtilization": utilization}

    def close(self) -> None:
        self.sampler.close()


def make_health_service(ws: Workspace) -> HealthService:
    hardware = getattr(ws.server, "hardware", None) or SystemHardware()
    return HealthService(ws, hardware)
