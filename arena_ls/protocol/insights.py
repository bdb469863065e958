"""Run insights inside the server: fed from each run's folder and the health sampler.

Once a second, every unfinished run's new output is read (``RunTracker``),
the latest health sample is handed in, and the rules are evaluated. When
the set of insights of a run changes, ``arena/statusChanged`` carries the
run's ``RunInfo`` with its new ``insights``; the first time a kind appears
in a run, a ``window/showMessage`` warning says what to do. The same tick
keeps the editor's AR013 diagnostics (``livediag.py``) in step with which
trainers have a live run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from arena_ls.health import process_tree_pids
from arena_ls.insights.tracker import RunTracker
from arena_ls.lifecycle.runview import RunView

if TYPE_CHECKING:
    from arena_ls.protocol.workspace import Workspace

log = logging.getLogger(__name__)

TICK_SECONDS = 1.0


class InsightService:
    """Every run's insights, as this server computes them."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.trackers: dict[str, RunTracker] = {}
        self.announced: dict[str, Any] = {}
        self.live_scripts: frozenset[Path] = frozenset()
        self._task: asyncio.Task[None] | None = None

    # -- lifetime -----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._tick_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _tick_forever(self) -> None:
        while True:
            try:
                self.tick()
            except Exception:  # insights must never stop the server
                log.exception("computing run insights failed")
            await asyncio.sleep(TICK_SECONDS)

    # -- one tick ------------------------------------------------------------------------

    def tick(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        settings = self.ws.server.settings.insights
        views = list(self.ws.supervisor.views.values())
        live = [v for v in views if not v.is_final]
        self.ws.health.sampler.set_active(bool(live))
        health = self.ws.health.sampler.latest()
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
                tracker.add_health_sample(health, process_tree_pids([state.pid]))
            tracker.note_trainer_file()
            tracker.evaluate(settings, now)
            self._changed(view)
        self._forget_gone({v.run_id for v in views})
        self._live_scripts_changed(
            {t.script for v in live if (t := self.trackers.get(v.run_id)) and t.script}
        )

    def _tracker(self, view: RunView) -> RunTracker:
        job = self.ws.manifest().jobs.get(view.spec.job_id.removesuffix(PROBE_SUFFIX))
        script = job.resolved_script(self.ws.root) if job is not None else None
        tracker = RunTracker(
            view.run_dir.path,
            view.parser,
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
        server = self.ws.server
        server.send_notification("arena/statusChanged", self.ws.run_info(view))
        for insight in tracker.engine.take_new():
            kind = types.MessageType.Warning if insight.severity == "warning" else types.MessageType.Info
            server.window_show_message(
                types.ShowMessageParams(kind, f"{view.spec.job_name}: {insight.kind}: {insight.message}")
            )

    def _forget_gone(self, run_ids: set[str]) -> None:
        for run_id in list(self.trackers):
            if run_id not in run_ids:
                self.trackers.pop(run_id, None)
                self.announced.pop(run_id, None)

    def _live_scripts_changed(self, scripts: set[Path]) -> None:
        """Re-publish open trainers' diagnostics when a run of one starts or ends (AR013)."""
        current = frozenset(scripts)
        if current == self.live_scripts:
            return
        self.live_scripts = current
        feature = getattr(self.ws.server, "diagnostics_feature", None)
        if feature is not None:
            for uri in list(feature.published):
                feature.schedule(uri, 0.0)

    # -- the wire ------------------------------------------------------------------------

    def wire(self, view: RunView) -> list[dict[str, Any]]:
        """``RunInfo.insights``: what holds now ([] for an ended run)."""
        tracker = self.trackers.get(view.run_id)
        if tracker is None or view.is_final:
            return []
        return [insight.to_wire() for insight in tracker.engine.current]


PROBE_SUFFIX = ".probe"
"""A probe run's job id is its job's id plus this (its checkpoints never resume the job)."""
