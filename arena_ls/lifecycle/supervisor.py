"""The server side of the lifecycle: start, stop, status, logs, re-adoption.

The supervisor knows nothing of LSP, nor of clusters. It starts each run
through the run back end that takes its job (``arena_ls.lifecycle.backends``,
composed where the server is built: this machine's detached agent, a Ray
cluster's agent), from one snapshot of the manifest per request,
follows every run of the workspace through its folder, and tells a
``Listener`` what changed. Several servers may supervise one workspace at
once: they agree through the files (the ``active.lock``, the agent's state,
once-only claims) rather than through each other.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from arena_ls import platform
from arena_ls.errors import (
    InvalidParams,
)
from arena_ls.health.checkpoint_history import CheckpointHistory
from arena_ls.health.model import BootIdentity
from arena_ls.lifecycle.after_restart import AfterRestart
from arena_ls.lifecycle.backends.base import Backends
from arena_ls.lifecycle.follower import Listener, RunFollower
from arena_ls.lifecycle.gate_verdict import GateVerdict
from arena_ls.lifecycle.history import KEEP_VIEWS, RunHistory
from arena_ls.lifecycle.jobcheckpoint import JobCheckpoints, JobKnowledge
from arena_ls.lifecycle.pruning import prune_history
from arena_ls.lifecycle.reboot import (
    AfterReboot,
    BootReader,
    interrupted_by_restart,
    restart_evidence,
)
from arena_ls.lifecycle.runrecord import RunRecorder
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.starter import DryRun, GateChecker, PreflightRunner, Starter, StartHook, StartRequest
from arena_ls.lifecycle.stopper import Stopper, StopRequest
from arena_ls.manifest import Job, ManifestResult
from arena_ls.manifest.cache import ManifestCache
from arena_ls.run.capture import Cursor, LogLine
from arena_ls.run.rundir import CheckpointRecord, CorruptState, RunDir, RunSpec, StateBusy
from arena_ls.run.runlock import RunLock, valid_run_id
from arena_ls.run.state_folder import StateFolder
from arena_ls.settings import Settings

log = logging.getLogger(__name__)

KEEP_FINISHED_RUNS = 50
SPEC_GRACE = 30.0
"""A run folder without ``spec.json`` younger than this may be one an older server is still writing."""
RECENT_POLL = 0.02
"""A status request or an ``arena/log`` flush reads the runs again only when the follower's last
round is older than this (20 ms: the pace at which a flood is read)."""
ADOPT_PER_SCAN = 8
"""Runs a scan adopts at most (each is a few file reads): the rest at the next scans."""


@attrs.define
class LogPage:
    """A page of a run's lines (``run_id`` None: no run to read); ``reset`` says why reading restarted."""

    run_id: str | None
    lines: list[LogLine]
    cursor: str | None
    done: bool
    reset: str | None = None


class Supervisor:
    """Every run of one workspace, as this server sees them."""

    def __init__(
        self,
        root: Path,
        settings: Callable[[], Settings],
        listener: Listener,
        *,
        gate_checker: GateChecker | None = None,
        preflight: PreflightRunner | None = None,
        backends: Backends,
        boot: BootReader | None = None,
        interrupted: Callable[[RunView], None] | None = None,
        recorder: RunRecorder | None = None,
        manifests: ManifestCache | None = None,
    ) -> None:
        self.root = root.resolve()
        self.settings = settings
        self.listener = listener
        self.gate_checker = gate_checker
        self.preflight = preflight
        self.backends = backends
        """Where runs execute (composed by the server): the supervisor reaches a back end only here."""
        self.views: dict[str, RunView] = {}
        self.prepared = False
        """``idle`` got the default back end ready (a spare agent) and no start of ours used it since."""
        self._folder: StateFolder | None = None
        self._folder_setting: str | None = None
        """The ``stateDir`` setting ``_folder`` was made for."""
        self._runlock: RunLock | None = None
        self.follower = RunFollower(self, listener)
        """The one follower of every run's files (this server's only loop over them)."""
        self.job_checkpoints = JobCheckpoints()
        """Each job's last checkpoint (``JobInfo.lastCheckpoint``), read again only when it changed."""
        self.manifests = manifests if manifests is not None else ManifestCache()
        """The manifest parsed once per content, for every reader (``arena_ls/manifest/cache.py``)."""
        self.history = RunHistory()
        """Every run folder, oldest first: ``views`` holds only the unfinished and newest runs."""
        self._unreadable: set[str] = set()
        """Run folders a scan could not adopt yet (looked at again at every scan)."""
        self._listed_version = 0
        """The history's listing ``scan`` last chose the runs to adopt from."""
        self._to_adopt: list[str] = []
        """Runs still to be adopted, newest first (a few per scan: a long history is taken over
        without holding the event loop; what is not adopted yet is read from disk when asked)."""
        self._read_ahead: dict[str, RunView] = {}
        """Views of runs to adopt, read on a worker thread by ``list_history`` for the next scan."""
        self.boot: BootReader = boot if boot is not None else _this_boot
        """Reads which boot of the machine this is (the tests' hardware fakes a later one)."""
        self.interrupted = interrupted
        """Told of each run this server recorded ``machine-restarted`` (``watchdog.afterReboot``)."""
        self.recorder = recorder
        """Makes each start's ``RunInfo.record`` (``runrecord.run_record``: git is a process); None:
        runs record nothing (the in-process tests' supervisors)."""
        self.starter = Starter(self)
        """Starts a job's run (``lifecycle/starter.py``)."""
        self.stopper = Stopper(self)
        """Stops a run (``lifecycle/stopper.py``)."""
        self.after_restart = AfterRestart(self)
        """The runs a restart of the machine interrupted (``lifecycle/after_restart.py``)."""

    # -- paths and manifest ----------------------------------------------------------------

    @property
    def folder(self) -> StateFolder:
        """The state folder (one object per path, so that each problem is reported once)."""
        setting = self.settings().state_dir
        if self._folder is not None and setting == self._folder_setting:
            return self._folder  # asked per job by a status (``job_checkpoint``): no path built
        state_dir = Path(setting)
        root = state_dir if state_dir.is_absolute() else self.root / state_dir
        self._folder_setting = setting
        if self._folder is None or self._folder.root != root:
            folder = StateFolder(root, report=self.listener.warning)
            self._folder = folder
            self._runlock = RunLock(folder, report=lambda text: folder.warn_once(text, text))
        return self._folder

    @property
    def runlock(self) -> RunLock:
        """The owner of run creation and of ``active.lock``."""
        folder = self.folder
        assert self._runlock is not None and self._runlock.folder is folder
        return self._runlock

    def manifest_path(self) -> Path:
        manifest = Path(self.settings().manifest)
        return manifest if manifest.is_absolute() else self.root / manifest

    def load_manifest(self) -> ManifestResult:
        """The manifest as parsed for its current content (parsed here only when that is new)."""
        return self.manifests.get(self.manifest_path(), self.root, self.folder.root)

    async def load_manifest_async(self, max_age: float | None = None) -> ManifestResult:
        """``load_manifest`` with any parse in a worker thread (``max_age``: revalidated if older)."""
        return await self.manifests.get_async(
            self.manifest_path(), self.root, self.folder.root, max_age=max_age
        )

    # -- following runs ----------------------------------------------------------------------

    def scan(self, *, list_folder: bool = True) -> None:
        """Find the runs of the state folder (re-adoption).

        The history (``lifecycle/history.py``) is listed again only when the
        ``runs`` folder changed. The newest ``KEEP_VIEWS`` runs and the lock's
        holder are adopted and followed; older runs stay on disk and are read
        when asked for (``arena/runs``, a ``runId``). A folder that cannot be
        read yet is looked at again on the next scan; a damaged one is adopted
        as ``lost`` with ``failure.kind`` ``damaged``.

        ``list_folder=False``: ``list_history`` has just listed the folder and read
        the runs to adopt on a worker thread; this scan only takes them.
        """
        folder = self.folder
        if list_folder:
            self.history.refresh(folder.runs_dir, force=bool(self._unreadable))
        if self.history.version != self._listed_version:  # listed here or by ``list_history``
            self._listed_version = self.history.version
            self._unreadable.clear()
            self._to_adopt = self._wanted()
        adopting, self._to_adopt = self._to_adopt[:ADOPT_PER_SCAN], self._to_adopt[ADOPT_PER_SCAN:]
        read, self._read_ahead = self._read_ahead, {}
        for run_id in adopting:
            if run_id in self.views:
                continue
            if self._adopt(RunDir(folder.runs_dir / run_id), read.get(run_id)) is None:
                self._unreadable.add(run_id)
        if adopting:
            self.forget_old_views()

    def _wanted(self) -> list[str]:
        """The runs of the history's listing to adopt, newest first: the lock's holder, then the
        newest ``KEEP_VIEWS`` (files only: ``list_history`` asks on a worker thread too)."""
        wanted = self.history.newest(KEEP_VIEWS)
        holder = self.runlock.holder()
        if holder is not None and self.history.created(holder) is not None:
            wanted.insert(0, holder)
        return [run_id for run_id in wanted if run_id not in self.views]

    def list_history(self) -> None:
        """What the next ``scan`` needs from disk, read on a worker thread (the follower's round,
        a status): the runs folder listed again if it changed, and the views of the runs it is
        to adopt next, with their logs' tails (files only). The scan, on the loop, then only
        takes them (``scan(list_folder=False)``): listing 5,000 runs took the loop 10 ms, and
        adopting eight runs read up to 20 ms of records each (issue 24). A view read here that
        the scan does not take is dropped."""
        self.history.refresh(self.folder.runs_dir, force=bool(self._unreadable))
        listed = self.history.version != self._listed_version
        upcoming = self._wanted() if listed else list(self._to_adopt)
        runs_dir = self.folder.runs_dir
        read = dict(self._read_ahead)
        for run_id in upcoming[:ADOPT_PER_SCAN]:
            if run_id not in self.views and run_id not in read:
                view = self._read_for_adoption(RunDir(runs_dir / run_id))
                if view is not None:
                    read[run_id] = view
        self._read_ahead = read

    def forget_old_views(self) -> None:
        """Keep the views bounded: a finished run outside the newest ``KEEP_VIEWS`` is let go once
        all its lines were read (it stays on disk, and in the history)."""
        finished = [v for v in self.views.values() if v.is_final]
        if len(finished) <= KEEP_VIEWS:
            return
        newest = set(self.history.newest(KEEP_VIEWS))
        for view in finished:
            if view.run_id not in newest and view.cursor.record >= view.reader.record_count():
                del self.views[view.run_id]

    def runs_total(self) -> int:
        """How many runs the workspace has (``arena/status``'s ``runsTotal``)."""
        return len(self.history) + sum(1 for r in self.views if self.history.created(r) is None)

    def newest_views(self, count: int, before: tuple[float, str] | None = None) -> list[RunView]:
        """The ``count`` newest runs (older than ``before``), newest first; a run no view follows is
        read from its folder for this answer only (files only: safe in a worker thread)."""
        ids = self.history.before(before, count)
        if before is None:  # runs created since the last listing come first
            fresh = [v for v in self.views.values() if self.history.created(v.run_id) is None]
            fresh.sort(key=lambda v: v.spec.created_at, reverse=True)
            ids = [v.run_id for v in fresh] + ids
        found = [self.views.get(run_id) or self.read_view(run_id) for run_id in ids[:count]]
        return [view for view in found if view is not None]

    def run_key(self, run_id: str) -> tuple[float, str] | None:
        """Where a run sits in the history (the key of ``newest_views``'s ``before``)."""
        created = self.history.created(run_id)
        return None if created is None else (created, run_id)

    def read_view(self, run_id: str) -> RunView | None:
        """A view of a run read from its folder, not followed (its RunInfo as its files say)."""
        run_dir = RunDir(self.folder.runs_dir / run_id)
        try:
            spec = run_dir.read_spec()
        except (CorruptState, OSError):
            spec = _placeholder_spec(run_dir)
        view = RunView(run_dir, spec, backend=self.backends.for_run(spec.backend))
        try:
            view.refresh_state()
        except Exception as error:  # one run's files never break the others
            view.mark_damaged(f"its files cannot be read: {error}")
        return view

    def _adopt(self, run_dir: RunDir, read: RunView | None = None) -> RunView | None:
        """Follow a run of the state folder (``read``: its view read already, by ``list_history``)."""
        view = self._read_for_adoption(run_dir) if read is None else self._state_now(read)
        if view is None:
            return None
        self.views[view.spec.run_id] = view
        self.report_damage(view)
        if self.check_lost(view):
            log.warning("run %s ended %s", view.spec.run_id, view.status.value)
        return view

    def check_lost(self, view: RunView) -> bool:
        """The verdict on an unfinished run whose agent is gone: ``lost``, or ``crashed`` with
        ``machine-restarted`` when the machine restarted since its launch (then ``interrupted``
        is told). True when this server recorded one."""
        recorded = view.check_lost(self.folder, self.restart_evidence)
        if recorded and interrupted_by_restart(view.state):
            log.warning(
                "run %s: %s",
                view.run_id,
                view.state.failure.evidence if view.state and view.state.failure else "",
            )
            if self.interrupted is not None:
                self.interrupted(view)
        return recorded

    def restart_evidence(self, spec: RunSpec) -> str | None:
        """Why the machine restarted since ``spec``'s launch, or None (``lifecycle/reboot.py``)."""
        try:
            now = self.boot()
        except Exception:  # the verdict stays ``lost`` rather than no verdict at all
            log.exception("reading the machine's boot failed")
            return None
        return restart_evidence(spec, now)

    def _state_now(self, view: RunView) -> RunView | None:
        """A view read ahead, with its state read again: the run may have ended since, and
        ``check_lost`` must judge the state as it is now, never an older one."""
        if view.damage is not None:
            return view
        try:
            view.refresh_state()
        except Exception as error:  # as in ``_read_for_adoption``
            log.exception("reading run %s failed", view.run_id)
            view.mark_damaged(f"its files cannot be read: {error}")
            return view
        return None if view.busy else view

    def _read_for_adoption(self, run_dir: RunDir) -> RunView | None:
        """A run's view with its log's tail and the tail's records read (files only: safe on a
        worker thread); None while it cannot be adopted yet (held open, its spec being written)."""
        damage: str | None = None
        try:
            spec = run_dir.read_spec()
            if spec.run_id != run_dir.run_id:
                damage = f"spec.json names run {spec.run_id[:80]!r}, not its folder's"
        except StateBusy as error:  # held open (Windows): adopted at a later scan, never skipped
            log.info("run folder %s: %s", run_dir.path, error)
            return None
        except FileNotFoundError:
            if _age(run_dir.path) < SPEC_GRACE:
                return None  # perhaps still being written: the next scan looks again
            damage = "spec.json is missing"
        except (CorruptState, OSError) as error:
            damage = _relative(str(error), run_dir)
        if damage is not None:
            spec = _placeholder_spec(run_dir)
        view = RunView(run_dir, spec, backend=self.backends.for_run(spec.backend))
        if damage is not None:
            view.mark_damaged(damage)
            view.placeholder = True
        try:
            view.refresh_state()
            if view.busy:  # its state is held open (Windows): adopted at a later scan, never skipped
                return None
            view.start_live_at_tail()
        except Exception as error:  # one run's files never break the others
            log.exception("reading run %s failed", run_dir.run_id)
            view.mark_damaged(f"its files cannot be read: {error}")
        return view

    def retry_damaged(self, view: RunView) -> None:
        """Look at a damaged run again (every second): a spec readable now means a fresh adoption."""
        if view.placeholder:
            try:
                view.run_dir.read_spec()
            except (FileNotFoundError, CorruptState, OSError):
                return
            del self.views[view.run_id]
            self._adopt(view.run_dir)
            return
        view.retry_damaged()
        self.notify_if_changed(view)

    def report_damage(self, view: RunView) -> None:
        if view.damage is not None:
            self.folder.warn_once(
                f"damaged:{view.run_id}:{view.damage}",
                f"run {view.run_id} is damaged ({view.damage}); it is listed as lost, "
                "its log stays readable as far as it goes",
            )

    # The following itself is the follower's (``follower.py``); these serve the protocol layer.

    def ensure_polling(self) -> None:
        self.follower.ensure_running()

    async def close(self) -> None:
        await self.follower.close()
        self.backends.default.release()

    def idle(self) -> None:
        """No run of the workspace is active (the follower says so): get ready for the next start."""
        self.backends.default.prepare(self.root)
        self.prepared = True

    def busy(self) -> None:
        """A run of the workspace is active, one another server started: let go of what ``idle``
        got ready (a spare agent never waits beside a running trainer)."""
        if self.prepared:
            self.prepared = False
            self.backends.default.release()

    def poll_once(self) -> bool:
        """Follow every unfinished run once; True while any run is active."""
        return self.follower.poll_once()

    def poll_recent(self, max_age: float = RECENT_POLL) -> bool:
        """``poll_once`` unless the follower's last round is younger than ``max_age``."""
        return self.follower.poll_unless_recent(max_age)

    def notify_if_changed(self, view: RunView) -> None:
        """Tell the listener about a change of a run's state, once (see ``RunFollower``)."""
        self.follower.notify_if_changed(view)

    def wake(self) -> None:
        self.follower.wake()

    # -- queries ---------------------------------------------------------------------------

    def active_view(self) -> RunView | None:
        """The workspace's active run (by the lock, else any unfinished run)."""
        holder = self.runlock.holder()
        if holder is not None:
            view = self.views.get(holder)
            if view is None:
                self.scan()
                view = self.views.get(holder)
            if view is not None and not view.is_final:
                return view
        unfinished = [v for v in self.views.values() if not v.is_final]
        return unfinished[-1] if unfinished else None

    def view_for(self, run_id: str) -> RunView:
        view = self.views.get(run_id)
        if view is None:
            self.scan()
            view = self.views.get(run_id)
        if view is None and valid_run_id(run_id) and self.history.created(run_id) is not None:
            view = self._adopt(RunDir(self.folder.runs_dir / run_id))  # an older run, asked for by id
            self.forget_old_views()
        if view is None:
            raise InvalidParams(f"runId: no run {run_id!r} in this workspace")
        return view

    def latest_view(self, job_id: str | None = None) -> RunView | None:
        candidates = [v for v in self.views.values() if job_id is None or v.spec.job_id == job_id]
        candidates.sort(key=lambda v: v.spec.created_at)
        return candidates[-1] if candidates else None

    def checkpoint_history(self, job_id: str) -> CheckpointHistory | None:
        """The job's checkpoints as its runs showed them (the pre-flight's disk check); None before any."""
        knowledge = JobKnowledge.read(self.folder, job_id)
        if knowledge.last is None:
            return None
        view = self.latest_view(job_id)
        total = view.state.total_steps if view is not None and view.state is not None else None
        return CheckpointHistory(tuple(knowledge.paths), knowledge.last.step, total)

    def our_pids(self) -> set[int]:
        """Pids on this machine of every trainer's process tree of the workspace's unfinished runs.

        The one place that says which processes are ours (pre-flight's GPU
        contention, the health sample's ``ours`` marks).
        """
        pids: set[int] = set()
        for view in list(self.views.values()):
            if view.state is not None and not view.is_final:
                pids.update(view.backend.local_pids(view.state))
        return pids

    # -- start, stop, and the resume after a restart: each its own object ---------------------

    async def start(
        self, request: StartRequest, *, admit: StartHook | None = None, launching: StartHook | None = None
    ) -> RunView | DryRun:
        """Start a run of a job, its VRAM probe, or (``dry_run``) say what would run (``Starter.start``)."""
        return await self.starter.start(request, admit=admit, launching=launching)

    async def gate_verdict(self, job: Job) -> GateVerdict:
        return await self.starter.gate_verdict(job)

    def job_checkpoint(self, job_id: str) -> CheckpointRecord | None:
        """``JobInfo.lastCheckpoint``: the job's last checkpoint across its runs (one stat when unchanged)."""
        return self.job_checkpoints.last(self.folder, job_id)

    async def stop(self, request: StopRequest) -> RunView | None:
        """Stop a run; the run asked for (None: nothing was stopped, the workspace is idle)."""
        return await self.stopper.stop(request)

    def after_reboot(self, view: RunView) -> AfterReboot | None:
        return self.after_restart.after_reboot(view)

    def interrupted_runs(self) -> list[RunView]:
        return self.after_restart.interrupted_runs()

    async def resume_after_restart(self, view: RunView) -> RunView | None:
        return await self.after_restart.resume_after_restart(view)

    # -- logs ------------------------------------------------------------------------------

    def logs(self, run_id: str | None, cursor: str | None, limit: int) -> LogPage:
        view, position = self.logs_target(run_id, cursor)
        if view is None:
            return LogPage(None, [], None, True)
        view.reader.check_cursor(position)
        return self.logs_page(view, position, limit)

    async def logs_async(self, run_id: str | None, cursor: str | None, limit: int) -> LogPage:
        """``logs`` with the reading done off the event loop (a page can be 10,000 lines)."""
        view, position = self.logs_target(run_id, cursor)
        if view is None:
            return LogPage(None, [], None, True)
        view.refresh_state()
        final_before = view.is_final

        def checked_page() -> LogPage:
            view.reader.check_cursor(position)
            return self.logs_page(view, position, limit, final_before)

        return await asyncio.to_thread(checked_page)  # one hop: arena/logs is polled often

    def logs_target(self, run_id: str | None, cursor: str | None) -> tuple[RunView | None, Cursor]:
        position = Cursor.decode(cursor) if cursor else None
        view = self.view_for(run_id) if run_id else (self.active_view() or self.latest_view())
        if view is None:
            return None, Cursor()
        return view, position or view.reader.start()

    def logs_page(
        self, view: RunView, position: Cursor, limit: int, final_before: bool | None = None
    ) -> LogPage:
        """A page of ``view``'s lines from ``position``; reads files only (safe in a thread)."""
        if final_before is None:
            view.refresh_state()
            final_before = view.is_final
        page = view.reader.read(position, limit)
        done = final_before and page.cursor.record >= view.reader.record_count()
        return LogPage(view.run_id, list(page.lines), page.cursor.encode(), done, page.reset or None)

    # -- housekeeping ----------------------------------------------------------------------

    async def prune(self, keep: int = KEEP_FINISHED_RUNS) -> None:
        """Keep the state folder bounded: delete finished runs beyond the last ``keep``, then the
        oldest ones whose logs take the workspace past ``logs.keepRunsMb``.

        Over the whole history, not only the followed views: the runs no view
        follows are read (and the doomed ones deleted) in a worker thread."""
        self.runlock.sweep_staging()
        self.scan()
        followed = dict(self.views)
        newest_first = self.history.before(None, len(self.history))
        budget = int(self.settings().logs_keep_runs_mb * 1024 * 1024)
        doomed = await asyncio.to_thread(prune_history, newest_first, followed, self.read_view, keep, budget)
        for run_id in doomed:
            self.views.pop(run_id, None)
            self.history.forget(run_id)


def _this_boot() -> BootIdentity:
    """This machine's boot, read from the system (``platform.boot_id``, ``platform.boot_time``)."""
    return BootIdentity(platform.boot_id(), platform.boot_time())


def _age(path: Path) -> float:
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return 0.0


def _relative(error: str, run_dir: RunDir) -> str:
    prefix = f"{run_dir.path}{os.sep}"
    return error[len(prefix) :] if error.startswith(prefix) else error


def _placeholder_spec(run_dir: RunDir) -> RunSpec:
    """A spec for a run whose own cannot be read: its job from its folder's name (``job-stamp-hex``)."""
    run_id = run_dir.run_id
    parts = run_id.rsplit("-", 2)
    job_id = parts[0] if len(parts) == 3 and valid_run_id(parts[0]) else run_id
    return RunSpec(
        run_id=run_id,
        job_id=job_id,
        job_name=job_id,
        kind="task",
        argv=[],
        cwd="",
        created_at=time.time() - _age(run_dir.path),
    )
