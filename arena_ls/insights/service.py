"""The insight service: every run's insights, fed from its records and the health sampler.

Once a second, every unfinished run's new output is read (``RunTracker``),
the latest health sample is handed in, and the rules are evaluated. When
the set of insights of a run changes, the listener (the server) hears it:
``arena/statusChanged`` carries the run's ``RunInfo`` with its new
``insights``, and the first time a kind appears in a run a
``window/showMessage`` warning says what to do. The same tick tells the
listener when the set of trainers with a live run changes, which keeps the
editor's AR013 diagnostics (``protocol/livediag.py``) in step.

No LSP here: what the client is told, and how, is the listener's
(``protocol``); background work runs through the server's task runner,
known here only as a ``TaskStarter``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol

import attrs

from arena_ls.health import process_tree_pids
from arena_ls.health.model import Health
from arena_ls.health.service import HealthService
from arena_ls.insights.disk import SAMPLE_SECONDS as DISK_SAMPLE_SECONDS
from arena_ls.insights.disk import DiskReading, read_run_disks
from arena_ls.insights.model import Insight
from arena_ls.insights.tracker import RunTracker
from arena_ls.lifecycle.probe_id import job_of
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.settings import Settings

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0


class TaskStarter(Protocol):
    """Starts a background task and keeps it until done (the server's ``TaskRunner``)."""

    def run_task(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]: ...


class InsightListener(Protocol):
    """What the insight service tells the server."""

    def insights_changed(self, view: RunView, new: list[Insight]) -> None:
        """The run's insights changed; ``new`` holds the kinds shown in this run for the first time."""

    def live_trainers_changed(self) -> None:
        """A run of some trainer started or ended."""


@attrs.frozen
class Prepared:
    """What ``tick_off_loop`` read on its worker thread for one tick."""

    health: Health
    pids: dict[str, set[int]]
    """Each live run's trainer process tree (by run id)."""
    disks: dict[str, list[DiskReading]] = attrs.field(factory=dict)
    """Each live run's disks (by run id), when this tick read them (``disk-runway``)."""


def trainer_pids(health: Health, pid: int) -> set[int]:
    """The trainer's process tree, as far as the GPU sample needs it: a sample that lists no GPU
    process marks nothing, and the tree walk (every process's /proc entry) is skipped."""
    if not any(gpu.processes for gpu in health.gpus):
        return {pid}
    return process_tree_pids([pid])


def _trainer_trees(work: list[RunView], health: Health) -> dict[str, set[int]]:
    """On a worker thread: each live trainer's process tree (the walk reads every process's
    /proc entry). The records are not read here: a run's one reader (``RunRecords``) is shared
    with its view, which the event loop reads, so it is read on the loop, bounded per read."""
    pids: dict[str, set[int]] = {}
    for view in work:
        state = view.state
        pids[view.run_id] = trainer_pids(health, state.pid) if state is not None and state.pid else set()
    return pids


class InsightService:
    """Every run's insights, as this server computes them."""

    def __init__(
        self,
        supervisor: Supervisor,
        health: HealthService,
        settings: Callable[[], Settings],
        listener: InsightListener,
        tasks: TaskStarter,
    ) -> None:
        self.supervisor = supervisor
        self.health = health
        self.settings = settings
        self.listener = listener
        self.tasks = tasks
        self.trackers: dict[str, RunTracker] = {}
        self.announced: dict[str, Any] = {}
        self.live_scripts: frozenset[Path] = frozenset()
        self._task: asyncio.Task[None] | None = None
        self._next_disk_read = 0.0

    # -- lifetime -----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = self.tasks.run_task(self._tick_forever(), "run insights tick")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _tick_forever(self) -> None:
        while True:
            try:
                await self.tick_off_loop()
            except Exception:  # insights must never stop the server
                log.exception("computing run insights failed")
            await asyncio.sleep(TICK_SECONDS)

    async def tick_off_loop(self) -> None:
        """``tick``, with its trainers' process trees walked on a worker thread first (issue 24:
        nothing on the loop over 5 ms)."""
        health = self.health.sampler.latest()
        work = [view for view in list(self.supervisor.views.values()) if not view.is_final]
        if not work:
            self.tick()
            return
        pids = await asyncio.to_thread(_trainer_trees, work, health)
        disks = await self._read_disks(work)
        self.tick(prepared=Prepared(health, pids, disks))

    async def _read_disks(self, work: list[RunView]) -> dict[str, list[DiskReading]]:
        """Every ``SAMPLE_SECONDS``, on a worker thread: what each live run has on each disk."""
        now = time.time()
        if now < self._next_disk_read or not self.settings().insights.enabled:
            return {}
        self._next_disk_read = now + DISK_SAMPLE_SECONDS
        targets = [
            (view.run_id, Path(view.spec.cwd), list(tracker.obs.checkpoint_paths), view.run_dir.path)
            for view in work
            if (tracker := self.trackers.get(view.run_id)) is not None
        ]
        free_mb = self.health.hardware.disk_free_mb

        def read() -> dict[str, list[DiskReading]]:
            return {
                run: read_run_disks(cwd, paths, folder, free_mb, now) for run, cwd, paths, folder in targets
            }

        return await asyncio.to_thread(read)

    # -- one tick ------------------------------------------------------------------------

    def tick(self, now: float | None = None, prepared: Prepared | None = None) -> None:
        """Evaluate every run's insights; with ``prepared``, the live runs' trainers' processes are
        in ``prepared.pids`` (``tick_off_loop``)."""
        now = time.time() if now is None else now
        settings = self.settings().insights
        views = list(self.supervisor.views.values())
        live = [v for v in views if not v.is_final]
        self.health.sampler.set_active(bool(live))
        health = prepared.health if prepared is not None else self.health.sampler.latest()
        for view in views:
            tracker = self.trackers.get(view.run_id)
            if view.is_final:
                if tracker is not None and tracker.engine.current:
                    tracker.engine.clear()
                    self._changed(view)
                continue
            tracker = tracker or self._tracker(view)
            tracker.read_new()
            state = view.state
            if state is not None and state.pid and tracker.is_new_sample(health):
                known = prepared.pids.get(view.run_id) if prepared is not None else None
                tracker.add_health_sample(health, known or trainer_pids(health, state.pid))
            for reading in prepared.disks.get(view.run_id, ()) if prepared is not None else ():
                tracker.obs.add_disk_sample(reading.device, reading.label, reading.sample)
            tracker.note_trainer_file()
            tracker.obs.ram_floor_mb = self.settings().preflight.min_free_ram_mb
            tracker.evaluate(settings, now)
            self._changed(view)
        self._forget_gone({v.run_id for v in views})
        self._live_scripts_changed(
            {t.script for v in live if (t := self.trackers.get(v.run_id)) and t.script}
        )

    def _tracker(self, view: RunView) -> RunTracker:
        job = self.supervisor.load_manifest().jobs.get(job_of(view.spec.job_id))
        script = job.resolved_script(self.supervisor.root) if job is not None else None
        tracker = RunTracker(
            view.records,
            created_at=view.spec.created_at,
            script=script,
            max_vram_mb=job.probe_max_vram_mb if job is not None else 5120,
        )
        self.trackers[view.run_id] = tracker
        return tracker

    def _changed(self, view: RunView) -> None:
        """Tell the client when the run's insights changed (kinds or since), and warn once per kind."""
        tracker = self.trackers[view.run_id]
        key = [(i.kind, i.since) for i in tracker.engine.current]
        if key == self.announced.get(view.run_id, []):
            return
        self.announced[view.run_id] = key
        self.listener.insights_changed(view, list(tracker.engine.take_new()))

    def _forget_gone(self, run_ids: set[str]) -> None:
        for run_id in list(self.trackers):
            if run_id not in run_ids:
                tracker = self.trackers.pop(run_id, None)
                if tracker is not None:
                    tracker.close()
                self.announced.pop(run_id, None)

    def _live_scripts_changed(self, scripts: set[Path]) -> None:
        """Re-publish open trainers' diagnostics when a run of one starts or ends (AR013)."""
        current = frozenset(scripts)
        if current == self.live_scripts:
            return
        self.live_scripts = current
        self.listener.live_trainers_changed()

    def live_run_of(self, script: Path) -> RunView | None:
        """The live run whose trainer is ``script``, if any."""
        for view in list(self.supervisor.views.values()):
            tracker = self.trackers.get(view.run_id)
            if not view.is_final and tracker is not None and tracker.script == script:
                return view
        return None

    # -- the wire ------------------------------------------------------------------------

    def wire(self, view: RunView) -> list[dict[str, Any]]:
        """``RunInfo.insights``: what holds now ([] for an ended run)."""
        tracker = self.trackers.get(view.run_id)
        if tracker is None or view.is_final:
            return []
        return [insight.to_wire() for insight in tracker.engine.current]
