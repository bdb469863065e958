"""The services behind one workspace: supervisor, manifest, gates, health and insights together.

``protocol.workspace.Workspace`` builds on this: it adds what only the
protocol layer knows (the probe, the ``JobInfo`` list, the contract's
objects). What is here works on plain objects and the files of the
workspace; it knows the server only as a ``WorkspaceListener``: what it
tells the client, never how.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from arena_ls import platform
from arena_ls.cluster.health import ClusterHealthSampler
from arena_ls.diagnostics import Severity
from arena_ls.errors import InvalidParams
from arena_ls.health import Hardware
from arena_ls.health.service import HealthService, Preflight
from arena_ls.insights.model import Insight
from arena_ls.insights.service import InsightService, TaskStarter
from arena_ls.lifecycle.backends.base import Backends
from arena_ls.lifecycle.follower import Listener
from arena_ls.lifecycle.follower_told import Passed
from arena_ls.lifecycle.reboot import AFTER_REBOOT_CLAIM
from arena_ls.lifecycle.runrecord import run_record
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.manifest import ManifestResult
from arena_ls.manifest.cache import ManifestCache
from arena_ls.settings import Settings


class WorkspaceListener(Listener, Protocol):
    """What the workspace tells the server (the supervisor's listener, and more)."""

    def insights_changed(self, view: RunView, new: list[Insight]) -> None: ...
    def live_trainers_changed(self) -> None: ...
    def active_changed(self) -> None: ...


class WorkspaceServices:
    """The plain services of the workspace behind one server."""

    def __init__(
        self,
        root: Path,
        settings: Callable[[], Settings],
        listener: WorkspaceListener,
        hardware: Hardware,
        tasks: TaskStarter,
        backends: Backends,
    ) -> None:
        self.root = root.resolve()
        self.listener = listener
        self._current_settings = settings
        # The gates (arena_ls.gates) and the pre-flight checks (arena_ls.health) are the
        # supervisor's collaborators; what they read of the workspace they read when asked.
        from arena_ls.gates.budget import GateBudget  # start-up speed: no gates before `initialize`
        from arena_ls.gates.cache import TrainerGates

        self.gate_budget = GateBudget()
        """The gates' worker process: every lint within a time and memory budget (issue 39),
        started at the first lint."""
        self.gates = TrainerGates(
            self.root,
            self.manifest,
            self._fp32_only,
            self._gate_severities,
            budget=self.gate_budget,
            profile_known=self._profile_known,
            read_profile_now=self._read_profile_now,
        )
        self.preflight = Preflight(hardware, self.settings, root=self.root, state_dir=self._state_dir)
        self.manifests = ManifestCache()
        """The manifest parsed once per content, for every reader: the supervisor's starts, the
        editor's diagnostics and lenses (``arena_ls/manifest/cache.py``)."""
        self.supervisor = Supervisor(
            self.root,
            self.settings,
            listener,
            gate_checker=self.gates.verdict,
            preflight=self.preflight.run,
            backends=backends,
            boot=hardware.boot_identity,
            interrupted=lambda _view: self.resume_after_reboot(),
            recorder=run_record,
            manifests=self.manifests,
        )
        self.tasks = tasks
        self.preflight.checkpoint_history = self.supervisor.checkpoint_history
        self.health = HealthService(
            hardware,
            self.settings,
            our_pids=self.supervisor.our_pids,
            active=lambda: self.supervisor.active_view() is not None,
        )
        self.cluster_health = ClusterHealthSampler()
        self.insights = InsightService(self.supervisor, self.health, self.settings, listener, tasks)

    def settings(self) -> Settings:
        return self._current_settings()

    def _state_dir(self) -> Path:
        return self.supervisor.folder.root

    def _fp32_only(self) -> bool | None:
        return self.health.fp32_only()

    def _profile_known(self, timeout_s: float | None) -> bool:
        return self.health.profile_known(timeout_s)

    def _read_profile_now(self) -> None:
        self.health.read_gpus_now()

    def _gate_severities(self) -> dict[str, Severity]:
        """AR010 an error on a Windows device, then the workspace's ``gates.severity`` (contract 7.3)."""
        from arena_ls.gates.severity import gate_severities  # start-up speed, as TrainerGates above

        return gate_severities(platform.windows_device(), self.settings().gates_severity)

    def start(self) -> None:
        """Adopt the runs already in the state folder and follow them."""
        self.supervisor.scan()
        self.supervisor.ensure_polling()
        self.insights.start()
        for view in list(self.supervisor.views.values()):
            if not view.is_final:
                self.supervisor.notify_if_changed(view)

    def manifest(self) -> ManifestResult:
        return self.supervisor.load_manifest()

    def manifest_path(self) -> Path:
        """The manifest the ``manifest`` setting names, resolved against the workspace."""
        return self.supervisor.manifest_path()

    def state_root(self) -> Path:
        """The state folder (``stateDir``), resolved."""
        return self._state_dir()

    def active_view(self) -> RunView | None:
        """The workspace's active run (by the run lock), if any."""
        return self.supervisor.active_view()

    def is_followed(self, run_id: str) -> bool:
        """Whether this server still follows the run (unfinished, or among the newest)."""
        return run_id in self.supervisor.views

    def statuses_missed(self, view: RunView) -> Passed:
        """The statuses the run passed through since the follower last told of it, which no reading
        caught (``lifecycle/follower_told.py``); the run's status now counts as told."""
        return self.supervisor.follower.told.missed_since_told(view)

    def read_runs_now(self, max_age: float) -> None:
        """Read what the runs wrote, unless the follower's last round is younger than ``max_age``."""
        self.supervisor.poll_recent(max_age)

    def resume_after_reboot(self) -> None:
        """``watchdog.afterReboot`` ``resume``: resume each run this boot's restart interrupted,
        once across every server of the workspace (the run's ``after-reboot`` claim), in the
        background. Called when a verdict of this server found one, and once the client's
        settings are in (``initialized``)."""
        if self.settings().watchdog_after_reboot != "resume":
            return
        for view in self.supervisor.interrupted_runs():
            if view.run_dir.claim_once(AFTER_REBOOT_CLAIM):
                self.tasks.run_task(self._resume(view), f"resuming run {view.run_id} after the restart")

    async def _resume(self, view: RunView) -> None:
        started = await self.supervisor.resume_after_restart(view)
        if started is not None:
            self.listener.active_changed()

    async def manifest_async(self) -> ManifestResult:
        """The manifest, parsed (when its content is new) in a worker thread."""
        return await self.supervisor.load_manifest_async()

    def gpu_use(self, view: RunView) -> tuple[int, float] | None:
        """(MB, utilisation %) of a live run's process tree on the GPUs; None without a GPU."""
        state = view.state
        if state is None or not state.pid or view.is_final:
            return None
        return self.health.gpu_use(state.pid)

    def shown_view(self, run_id: str | None) -> RunView | None:
        """The run ``run_id`` names, or without one the active run, else the latest."""
        supervisor = self.supervisor
        if run_id:
            return supervisor.view_for(run_id)
        return supervisor.active_view() or supervisor.latest_view()

    async def newest_views(self, count: int, before: tuple[float, str] | None = None) -> list[RunView]:
        """``Supervisor.newest_views``; in a worker thread when some of them must be read from disk."""
        supervisor = self.supervisor
        ids = supervisor.history.before(before, count)
        if all(run_id in supervisor.views for run_id in ids):
            return supervisor.newest_views(count, before)
        return await asyncio.to_thread(supervisor.newest_views, count, before)

    def runs_key(self, before: str) -> tuple[float, str]:
        """Where ``before`` (a run id) sits in the history; -32602 for a run the workspace lacks."""
        supervisor = self.supervisor
        key = supervisor.run_key(before)
        if key is None:
            supervisor.scan()
            key = supervisor.run_key(before)
        if key is None:
            raise InvalidParams(f"field `before`: no run {before[:100]!r} in this workspace")
        return key
