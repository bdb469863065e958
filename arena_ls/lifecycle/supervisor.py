"""The server side of the lifecycle: start, stop, status, logs, re-adoption.

The supervisor knows nothing of LSP, nor of clusters. It starts each run
through the run back end that takes its job (``arena_ls.lifecycle.backends``,
composed where the server is built: this machine's detached agent, a Ray
cluster's follower), from one snapshot of the manifest per request,
follows every run of the workspace through its folder, and tells a
``Listener`` what changed. Several servers may supervise one workspace at
once: they agree through the files (the ``active.lock``, the agent's state,
once-only claims) rather than through each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from arena_ls import platform
from arena_ls.diagnostics import Diag
from arena_ls.errors import (
    ALREADY_RUNNING,
    APPROVAL_REQUIRED,
    DISABLED,
    GATES_FAILED,
    INVALID_MANIFEST,
    LAUNCH_FAILED,
    NO_CHECKPOINT,
    NOT_ALLOWLISTED,
    PREFLIGHT_FAILED,
    ArenaError,
    InvalidParams,
)
from arena_ls.health.model import BootIdentity
from arena_ls.lifecycle import supervisor_events
from arena_ls.lifecycle.backends.base import AgentProcess, Backends, Check, RunBackend, RunPlan
from arena_ls.lifecycle.capture import Cursor, LogLine
from arena_ls.lifecycle.checkpoint_age import describe, stale_checkpoint_refusal
from arena_ls.lifecycle.checkpoint_history import CheckpointHistory
from arena_ls.lifecycle.exec_check import exec_check
from arena_ls.lifecycle.follower import Listener, RunFollower
from arena_ls.lifecycle.gate_verdict import GateVerdict
from arena_ls.lifecycle.history import KEEP_VIEWS, RunHistory
from arena_ls.lifecycle.jobcheckpoint import JobCheckpoints, JobKnowledge, OverwriteCheck, start_refusal
from arena_ls.lifecycle.notify_events import notify_spec
from arena_ls.lifecycle.power import power_spec
from arena_ls.lifecycle.probe import probe_job
from arena_ls.lifecycle.reboot import (
    BOOT_TOLERANCE,
    AfterReboot,
    BootReader,
    after_reboot,
    boot_record,
    interrupted_by_restart,
    record_resumed,
    restart_evidence,
)
from arena_ls.lifecycle.resume_args import ResumePathUnknown, path_at, uses_path
from arena_ls.lifecycle.retention import FinishedRun, is_log_file, runs_over_budget
from arena_ls.lifecycle.rundir import (
    CheckpointRecord,
    CorruptState,
    Failure,
    RollbackSpec,
    RunDir,
    RunSpec,
    RunState,
    StateBusy,
    StateFolder,
)
from arena_ls.lifecycle.runlock import RunHeld, RunLock, Verdict, valid_run_id
from arena_ls.lifecycle.runrecord import RunRecorder
from arena_ls.lifecycle.runview import DISK_FULL_BYTES, RunView
from arena_ls.lifecycle.states import RunStatus
from arena_ls.lifecycle.trainer_start import recorded_argv, trainer_argv
from arena_ls.manifest import Job, ManifestResult
from arena_ls.manifest.cache import ManifestCache
from arena_ls.manifest.model import PYTHON_PLACEHOLDER
from arena_ls.settings import Settings

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0
START_POLL_MOST = 0.01
"""How often a start looks for the trainer's pid (a stat of state.json): ``launch`` records it
about 50 ms after it was spawned, and ``arena/start`` answers as soon as it sees it."""
KEEP_FINISHED_RUNS = 50
SPEC_GRACE = 30.0
"""A run folder without ``spec.json`` younger than this may be one an older server is still writing."""
HOLDER_WAIT = 5.0
"""How long a refused start waits for the active run's folder to become readable, to show it."""
RECENT_POLL = 0.02
"""A status request or an ``arena/log`` flush reads the runs again only when the follower's last
round is older than this (20 ms: the pace at which a flood is read)."""
ADOPT_PER_SCAN = 8
"""Runs a scan adopts at most (each is a few file reads): the rest at the next scans."""
START_MANIFEST_AGE = 1.0
"""A start checks the manifest as loaded at most this long ago (its paths may have changed since)."""
STOP_ANSWER_MARGIN = 30.0
"""``arena/stop`` waits for the final status at most the grace window and this much more, then
answers the run as it stands (a follower that cannot reach its cluster keeps asking it to stop)."""


GateChecker = Callable[[Job], GateVerdict]
"""The gates' verdict on a job's trainer as its bytes are now (no errors: it passes), with the digest
of the bytes judged: ``TrainerGates.verdict``."""
PreflightRunner = Callable[[Job, list[Diag], set[int]], tuple[list[dict[str, Any]], list[str]]]
"""(checks as wire dicts, warning lines) for a job about to start: ``Preflight.run``."""
StartHook = Callable[[Job], None]
"""Told the job of a start (as the request's manifest snapshot has it); may refuse it by raising."""


@attrs.define
class StartRequest:
    id: str
    approved: bool = False
    resume: bool | str = "auto"
    start_step: int | None = None
    dry_run: bool = False
    probe: bool = False
    """Start the job's VRAM probe instead (``lifecycle/probe.py``): a start variant, same refusals."""
    confirm: bool = False
    """A person agreed to what 1011 ``checkpoint-mismatch`` or 1012 ``already-finished`` warns of."""


@attrs.define
class DryRun:
    """What a start would run, and what its gates and pre-flight say (the protocol layer words it)."""

    argv: list[str]
    cwd: str
    gate_errors: list[Diag]
    checks: list[dict[str, Any]]


@attrs.frozen
class Planned:
    """What one start decided before its run is created, all from the request's one manifest snapshot."""

    backend: RunBackend
    plan: RunPlan
    command: list[str]
    """The job's command line with ``{python}`` resolved (``RunSpec.argv``), built once."""
    manifest: ManifestResult
    judged: dict[str, str] = attrs.field(factory=dict)
    """The digest of the bytes the gates judged, by file (the exec-time check compares them)."""


@attrs.define
class LogPage:
    """A page of a run's lines (``run_id`` None: no run to read); ``reset`` says why reading restarted."""

    run_id: str | None
    lines: list[LogLine]
    cursor: str | None
    done: bool
    reset: str | None = None


@attrs.define
class StopRequest:
    id: str | None = None
    run_id: str | None = None
    kill: bool = False
    confirm: bool = False
    grace_seconds: float | None = None
    wait: bool = True


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
    ) -> None:
        self.root = root.resolve()
        self.settings = settings
        self.listener = listener
        self.gate_checker = gate_checker
        self.preflight = preflight
        self.backends = backends
        """Where runs execute (composed by the server): the supervisor reaches a back end only here."""
        self.views: dict[str, RunView] = {}
        self._prepared = False
        """``idle`` got the default back end ready (a spare agent) and no start of ours used it since."""
        self._folder: StateFolder | None = None
        self._folder_setting: str | None = None
        """The ``stateDir`` setting ``_folder`` was made for."""
        self._runlock: RunLock | None = None
        self.follower = RunFollower(self, listener)
        """The one follower of every run's files (this server's only loop over them)."""
        self.job_checkpoints = JobCheckpoints()
        """Each job's last checkpoint (``JobInfo.lastCheckpoint``), read again only when it changed."""
        self.manifests = ManifestCache()
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
        """The verdict on an unfinished run whose follower is gone: ``lost``, or ``crashed`` with
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
        self._prepared = True

    def busy(self) -> None:
        """A run of the workspace is active, one another server started: let go of what ``idle``
        got ready (a spare agent never waits beside a running trainer)."""
        if self._prepared:
            self._prepared = False
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

    # -- start -----------------------------------------------------------------------------

    def resolve_job(self, job_id: str, manifest: ManifestResult) -> Job:
        """The job ``job_id`` names in ``manifest`` (the request's snapshot), or the refusal that
        says why it cannot start (1006, 1001)."""
        if manifest.fatal:
            raise ArenaError(
                INVALID_MANIFEST,
                f"the manifest {manifest.path} does not load",
                diagnostics=[d.to_wire() for d in manifest.errors],
            )
        job = manifest.jobs.get(job_id)
        if job is None and job_id in manifest.all_ids:
            diags = [d.to_wire() for d in manifest.job_diagnostics.get(job_id, ()) if d.is_error]
            raise ArenaError(
                INVALID_MANIFEST, f"job {job_id!r} has errors in the manifest", diagnostics=diags
            )
        if job is None and any(stage.id == job_id for stage in manifest.stages):
            raise ArenaError(
                NOT_ALLOWLISTED,
                f"{job_id!r} is a stage of the manifest, with no command: turn it into a job (AR115)",
                known=list(manifest.all_ids),
            )
        if job is None:
            raise ArenaError(
                NOT_ALLOWLISTED,
                f"no job {job_id!r} in the manifest",
                known=list(manifest.all_ids),
            )
        return job

    async def start(
        self, request: StartRequest, *, admit: StartHook | None = None, launching: StartHook | None = None
    ) -> RunView | DryRun:
        """Start a run of a job, or (``request.probe``) of its VRAM probe, or (``dry_run``) say what
        would run.

        The manifest is read once, at the start of the request: the job, its
        back end's plan, its argv, its spec and its pre-flight all come from
        that one snapshot. ``admit`` is told the job first (it may refuse it:
        the probe requirement, 1010); ``launching`` once every refusal has
        passed, right before the run is created (the probe records its trainer).
        """
        manifest = await self.load_manifest_async(max_age=START_MANIFEST_AGE)  # parsed off the event loop
        job = self.resolve_job(request.id, manifest)
        if admit is not None:
            admit(job)
        if job.status == "disabled":
            raise ArenaError(DISABLED, f"job {job.id!r} is disabled in the manifest")
        launched = probe_job(job) if request.probe else job
        backend = self.backends.for_job(launched)
        plan = backend.plan(launched, manifest, self.settings())
        command = launched.argv(plan.python)
        """The job's command line, built once: the dry run's answer, the spec and the exec check."""
        if plan.runs_here:
            self._refuse_a_command_too_long(launched, command)
        verdict = await self.gate_verdict(job)
        gate_errors = verdict.errors
        resume_step = None if request.probe else self._resume_step(job, request)
        resume_path = self._resume_path(launched, resume_step)
        if request.dry_run:
            argv = trainer_argv(command, launched.resume_args, resume_step, resume_path)
            return await self._dry_run(launched, plan, argv, gate_errors)
        if job.status == "approval-required" and request.approved is not True:
            verb = "probe" if request.probe else "start"
            raise ArenaError(
                APPROVAL_REQUIRED, f"job {job.id!r} needs approval: {verb} it with approved: true"
            )
        await self._refuse_if_active()
        knowledge = None if request.probe else JobKnowledge.read(self.folder, job.id)
        if knowledge is not None:
            self._refuse_overwrite(job, request, knowledge)
        own_check = await self._own_check(plan) if not gate_errors else None
        warnings = self._refuse_if_unsafe(job, plan, verdict, own_check)
        if launching is not None:
            launching(job)
        fresh = knowledge is not None and job.kind == "train" and request.resume is False
        planned = Planned(backend, plan, command, manifest, verdict.judged())
        record = None
        if self.recorder is not None:
            record = await asyncio.to_thread(  # git is a process: never on the event loop
                self.recorder,
                root=self.root,
                python=plan.python,
                argv=recorded_argv(command, launched.resume_args, resume_step, resume_path),
                manifest=self.manifest_path(),
                settings=self.settings(),
            )
        view = await self._launch(launched, planned, resume_step, knowledge, fresh=fresh, record=record)
        for warning in warnings:
            self.listener.lifecycle(view, supervisor_events.warning(warning))
        return await self._await_started(view)

    @staticmethod
    def _refuse_a_command_too_long(job: Job, command: list[str]) -> None:
        """1009 before anything of the run exists when the OS would refuse to exec the command line
        (issue 39: a 20 MB argument failed inside the agent, and the run ended ``lost``)."""
        refused = platform.command_line_refusal(
            [*command, *job.resume_args], {**os.environ, **job.env_dict()}
        )
        if refused is not None:
            evidence = f"job {job.id!r} cannot be started: {refused}; nothing was started"
            raise ArenaError(LAUNCH_FAILED, evidence, evidence=evidence)

    async def gate_verdict(self, job: Job) -> GateVerdict:
        """The gates' verdict on the job's trainer as it is now (read, hashed and, when not cached,
        linted in a worker thread)."""
        if self.gate_checker is None or job.kind != "train":
            return GateVerdict([])
        return await asyncio.to_thread(self.gate_checker, job)

    async def _dry_run(self, job: Job, plan: RunPlan, argv: list[str], gate_errors: list[Diag]) -> DryRun:
        """What a start of ``job`` would run, and what its gates and pre-flight say; nothing starts."""
        checks, _ = self._preflight(job, plan, gate_errors, await self._own_check(plan))
        return DryRun(argv, str(job.resolved_cwd(self.root)), gate_errors, checks)

    def _refuse_if_unsafe(
        self, job: Job, plan: RunPlan, verdict: GateVerdict, own_check: Check | None
    ) -> list[str]:
        """1004 when the trainer fails error-severity gates, 1005 when a pre-flight check fails.

        Returns the pre-flight warnings of a job that may start (a start and a probe alike).
        """
        gate_errors = verdict.errors
        if gate_errors:
            first = gate_errors[0]
            changed = (
                f"{job.script} changed since the gates last read it (its size, modification time "
                "and inode were kept): the trainer now "
                if verdict.changed_unseen
                else f"{job.script} "
            )
            raise ArenaError(
                GATES_FAILED,
                f"{changed}fails {len(gate_errors)} gate(s): {first.code} {first.message}",
                diagnostics=[d.to_wire() for d in gate_errors],
            )
        checks, warnings = self._preflight(job, plan, gate_errors, own_check)
        failed = [c for c in checks if not c.get("ok")]
        if failed:
            names = ", ".join(f"{c['name']}: {c['message']}" for c in failed)
            raise ArenaError(PREFLIGHT_FAILED, f"pre-flight failed: {names}", checks=checks)
        return warnings

    async def _own_check(self, plan: RunPlan) -> Check | None:
        """The back end's own pre-flight check (a cluster's), in a thread: a lost head takes seconds."""
        if plan.own_check is None:
            return None
        return await asyncio.to_thread(plan.own_check)

    def _preflight(
        self, job: Job, plan: RunPlan, gate_errors: list[Diag], own_check: Check | None
    ) -> tuple[list[Check], list[str]]:
        """This machine's pre-flight (``Preflight.run``) as the back end keeps it, with its own check."""
        if self.preflight is None:
            checks: list[Check] = []
            warnings: list[str] = []
        else:
            checks, warnings = self.preflight(job, gate_errors, self.our_pids())
        return plan.checks(checks, own_check), warnings

    def _resume_step(self, job: Job, request: StartRequest) -> int | None:
        if job.kind != "train" or not job.resume_args or request.resume is False:
            return None
        if request.start_step is not None:
            return request.start_step
        record = self.folder.job_checkpoint(job.id)
        if record is None:
            if request.resume is True:
                raise InvalidParams(f"resume: job {job.id!r} has no recorded checkpoint; pass startStep")
            return None
        return record.step

    def _resume_path(self, job: Job, step: int | None) -> str | None:
        """The path ``{path}`` resumes from: the job's recorded checkpoint at ``step``.

        A job whose ``resume.args`` name ``{path}``, asked to resume at a step whose
        checkpoint path is not known (a confirmed ``startStep`` of another checkpoint),
        is refused here: the trainer is never told a literal ``{path}``.
        """
        if step is None:
            return None
        path = path_at(step, [self.folder.job_checkpoint(job.id)])
        if path is None and uses_path(job.resume_args):
            raise InvalidParams(f"startStep: {ResumePathUnknown(step)}")
        return path

    def _refuse_overwrite(self, job: Job, request: StartRequest, knowledge: JobKnowledge) -> None:
        """1011 / 1012 (contract 7.1): a start that would overwrite what the job saved, unconfirmed."""
        check = OverwriteCheck(
            kind=job.kind,
            resume=request.resume,
            start_step=request.start_step,
            confirm=request.confirm,
            last=knowledge.last,
            last_run=self.latest_view(job.id),
        )
        refusal = start_refusal(check)
        if refusal is not None:
            raise refusal

    def job_checkpoint(self, job_id: str) -> CheckpointRecord | None:
        """``JobInfo.lastCheckpoint``: the job's last checkpoint across its runs (one stat when unchanged)."""
        return self.job_checkpoints.last(self.folder, job_id)

    async def _refuse_if_active(self) -> None:
        """Refuse early (before gates and pre-flight) while the lock's holder lives."""
        self.scan()
        judgement = self.runlock.judge_now()
        if judgement is not None and judgement.verdict is Verdict.HELD:
            raise await self._already_running(RunHeld(judgement.run_id, judgement.reason))

    async def _already_running(self, held: RunHeld) -> ArenaError:
        """1003 with the active run (waiting a moment for a run that is just being created)."""
        view = None
        deadline = time.monotonic() + HOLDER_WAIT
        while held.run_id is not None:
            self.scan()
            view = self.views.get(held.run_id)
            if view is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        if view is not None:
            view.refresh_state()
            what = f"run {view.run_id} of job {view.spec.job_id!r} is {view.status.value}"
        else:
            what = held.reason
        return ArenaError(
            ALREADY_RUNNING,
            f"{what}; one job at a time",
            active=view,  # the protocol layer sends it as its RunInfo
        )

    async def _launch(
        self,
        job: Job,
        planned: Planned,
        resume_step: int | None,
        knowledge: JobKnowledge | None = None,
        *,
        fresh: bool = False,
        record: dict[str, Any] | None = None,
    ) -> RunView:
        """Create the run (``RunLock.claim``), start it through its back end, record its follower.

        ``planned`` is what the start decided from its manifest snapshot; ``knowledge`` (the
        job's checkpoints) goes to the run's spec; ``fresh`` (a start with ``resume: false``)
        begins the job anew before the agent can announce anything."""
        knowledge = knowledge or JobKnowledge(None, [])
        await self.prune()
        settings = self.settings()
        backend, plan = planned.backend, planned.plan
        specs: list[RunSpec] = []
        allowed_roots = [str(self.root.resolve()), *(str(folder) for folder in planned.manifest.roots)]
        exec_checked = (
            self._exec_check(job, planned.command, allowed_roots, planned.judged) if plan.runs_here else None
        )

        def build(run_id: str) -> RunSpec:
            spec = RunSpec(
                run_id=run_id,
                job_id=job.id,
                job_name=job.display_name,
                kind=job.kind,
                argv=list(planned.command),
                cwd=str(job.resolved_cwd(self.root)),
                env=job.env_dict(),
                resume_args=list(job.resume_args),
                stop_method=job.stop_method,
                grace_seconds=job.grace_seconds,
                max_restarts=job.max_restarts,
                backoff_seconds=job.backoff_seconds,
                progress_pattern=job.progress_pattern,
                checkpoint_pattern=job.checkpoint_pattern,
                stall_seconds=settings.watchdog_stall_seconds,
                stall_factor=settings.watchdog_stall_factor,
                stall_min_seconds=settings.watchdog_stall_min_seconds,
                stall_action=settings.watchdog_stall_action,
                resumed_from_step=resume_step,
                backend=backend.name,
                cluster=plan.cluster,
                job_checkpoint=knowledge.for_run(resume_step),
                checkpoint_paths=list(knowledge.paths),
                checkpoint_history=job.checkpoint_history,
                rollback=rollback_spec(settings) if plan.runs_here and job.kind == "train" else None,
                job_history=knowledge.history_for_run(resume_step),
                exec_check=exec_checked,
                allowed_roots=allowed_roots,
                power=power_spec(settings) if plan.runs_here and job.kind == "train" else None,
                log_max_run_mb=settings.logs_max_run_mb,
                notify=notify_spec(settings),
                boot=boot_record(self.boot()) if plan.runs_here else None,
                record=record,
            )
            specs.append(spec)
            return spec

        try:
            run_dir = self.runlock.claim(job.id, build)
        except RunHeld as held:
            raise await self._already_running(held) from held
        except OSError as error:
            evidence = f"the run could not be created in {self.folder.root}: {error}"
            raise ArenaError(LAUNCH_FAILED, evidence, evidence=evidence) from error
        spec = specs[-1]
        self._prepared = False  # the start takes what idle got ready (or lets it go)
        if fresh:
            self._begin_anew(job.id, spec.run_id)
        try:
            agent = backend.start(run_dir, self.root)
        except OSError as error:
            if fresh and knowledge.last is not None:  # nothing ran: the job's last checkpoint stands
                with contextlib.suppress(OSError):
                    self.folder.record_job_checkpoint(job.id, knowledge.last)
            self.runlock.release(spec.run_id)
            shutil.rmtree(run_dir.path, ignore_errors=True)  # nothing ran: leave nothing
            evidence = f"could not start the job agent: {error}"
            raise ArenaError(LAUNCH_FAILED, evidence, evidence=evidence) from error
        try:
            self.runlock.record_agent(spec.run_id, agent.pid, platform.process_identity(agent.pid))
        except OSError as error:  # the lock still names its creator; the agent's state takes over
            log.warning("could not record the agent in the lock: %s", error)
        view = RunView(run_dir, spec, agent, backend=backend)
        self.views[spec.run_id] = view
        self.wake()
        return view

    def _begin_anew(self, job_id: str, run_id: str) -> None:
        """``resume: false``: the job has no last checkpoint from now on (a failed write is logged:
        the run's own first checkpoint replaces the record anyway)."""
        try:
            self.folder.begin_job_anew(job_id, run_id)
        except OSError as error:
            log.warning("could not record that job %s begins anew: %s", job_id, error)

    def _exec_check(
        self, job: Job, command: list[str], roots: list[str], judged: dict[str, str]
    ) -> dict[str, Any] | None:
        """The gated paths whatever execs the trainer checks again right before it (issue 24),
        inside ``roots``: the workspace, then the manifest's ``roots`` (contract 7.3). Only for a
        trainer that runs on this machine (a cluster's runs from the package its follower submits)."""
        command_is_path = job.command != PYTHON_PLACEHOLDER and ("/" in job.command or os.sep in job.command)
        return exec_check(
            str(job.resolved_cwd(self.root)),
            command,
            job.script,
            roots,
            command_is_path=command_is_path,
            judged=judged,
        )

    async def _await_started(self, view: RunView) -> RunView:
        """Wait until the trainer process exists, the start failed, or the agent died (1009)."""
        agent = view.agent  # kept here: the follower drops ``view.agent`` once it has ended

        def start_failed() -> int | None:
            code = agent.poll() if agent is not None else view.agent_exit
            return code if code is not None and view.backend.start_failed(code) else None

        view.refresh_state()
        await self.follower.until(
            view,
            lambda v: _trainer_known(v) or start_failed() is not None,
            START_TIMEOUT,
            most=START_POLL_MOST,
        )
        code = start_failed()
        if code is not None and not _trainer_known(view):
            view.refresh_state()
            if not _trainer_known(view):
                if agent is not None and self._start_again(view, agent):
                    return await self._await_started(view)
                raise self._launch_failed(view, code)
        self.notify_if_changed(view)
        return view

    def _start_again(self, view: RunView, failed: AgentProcess) -> bool:
        """The run's follower died before it recorded a trainer: start another where the back end
        can prove nothing of the run started (a spare agent that died before it took the run).

        Done in one turn of the lock, which must still be this run's: the lock
        named the dead follower, so another server may have taken the workspace.
        """
        try:
            again = self.runlock.replace_agent(
                view.run_id, lambda: view.backend.start_again(view.run_dir, self.root, failed)
            )
        except OSError as error:
            log.warning("run %s: could not start its agent again: %s", view.run_id, error)
            return False
        if again is None:
            return False
        view.agent, view.agent_exit = again, None
        self.wake()
        return True

    def _launch_failed(self, view: RunView, code: int) -> ArenaError:
        """The agent died before it recorded a trainer: the run is over, and the start failed."""
        evidence = launch_evidence(view.run_dir, code)
        kind = "disk-full" if "No space left" in evidence or "ENOSPC" in evidence else "error"
        state = view.state or RunState(run_id=view.run_id, job_id=view.spec.job_id)
        remains = view.backend.end_remains(view.run_dir, state)  # a cluster job it may have submitted
        if remains:
            evidence += f"; {remains}"
        state.status = RunStatus.LOST
        state.failure = Failure(kind, evidence)
        state.ended_at = time.time()
        view.state = state
        with contextlib.suppress(OSError):  # a full disk may refuse this too: the lock goes anyway
            view.run_dir.write_state(state)
            view.state_signature = view.run_dir.state_signature()
        self.runlock.release(view.run_id)
        self.notify_if_changed(view)
        return ArenaError(
            LAUNCH_FAILED,
            f"the run could not be started: {evidence}",
            evidence=evidence,
            runId=view.run_id,
        )

    # -- after a restart of the machine (contract 8.3, ``lifecycle/reboot.py``) -----------

    def after_reboot(self, view: RunView) -> AfterReboot | None:
        """What a run the machine's restart interrupted offers (None: the restart did not end it)."""
        if not interrupted_by_restart(view.state):
            return None
        record = self.job_checkpoint(view.spec.job_id) if view.spec.kind == "train" else None
        latest = self.latest_view(view.spec.job_id)
        newer = latest.run_id if latest is not None and latest.run_id != view.run_id else None
        policy = self.settings().watchdog_after_reboot
        offered = after_reboot(view.run_dir, policy, record.step if record is not None else None, newer)
        if record is not None and record.path and uses_path(view.spec.resume_args):
            offered = attrs.evolve(offered, path=record.path)  # the step alone would mislead
        return offered

    def interrupted_runs(self) -> list[RunView]:
        """The runs a restart of this boot interrupted that may still be resumed (an offer stands,
        nothing resumed them, no resume was tried): the candidates of ``watchdog.afterReboot``."""
        boot_time = self.restart_boot_time()
        found = []
        for view in list(self.views.values()):
            offer = self.after_reboot(view)
            if offer is None or offer.offer is None or offer.problem is not None:
                continue
            ended = view.state.ended_at if view.state is not None else None
            if boot_time is not None and ended is not None and ended < boot_time - BOOT_TOLERANCE:
                continue  # interrupted by an earlier restart: a person has had the offer since
            found.append(view)
        return found

    def restart_boot_time(self) -> float | None:
        try:
            return self.boot().boot_time
        except Exception:
            log.exception("reading the machine's boot failed")
            return None

    async def resume_after_restart(self, view: RunView) -> RunView | None:
        """Resume a run the restart interrupted (its caller holds the run's once-only claim):
        a start of its job with resume, through every gate and pre-flight check, from the job's
        last checkpoint once its file is found. What stops it is recorded in the run's
        ``after-reboot.json`` (the clients show it beside the offer); never tried again here."""
        job_id = view.spec.job_id
        record = self.job_checkpoint(job_id)
        problem = _missing_checkpoint(view.spec, record)
        if problem is None and record is not None:
            request = StartRequest(id=job_id, approved=True, resume=True, start_step=record.step)
            try:
                started = await self.start(request)
            except (ArenaError, InvalidParams) as error:
                problem = f"the resume after the restart was refused: {error}"
            else:
                if isinstance(started, RunView):
                    record_resumed(view.run_dir, started.run_id, step=record.step)
                    log.info("run %s: resumed after the restart as run %s", view.run_id, started.run_id)
                    return started
        log.warning("run %s: %s", view.run_id, problem)
        record_resumed(view.run_dir, None, problem)
        self.notify_if_changed(view)
        return None

    # -- stop ------------------------------------------------------------------------------

    def _target(self, request: StopRequest) -> RunView | None:
        if request.run_id:
            return self.view_for(request.run_id)
        self.scan()
        active = self.active_view()
        if request.id is not None:
            if active is not None and active.spec.job_id == request.id:
                return active
            return None
        return active

    async def stop(self, request: StopRequest) -> RunView | None:
        """Stop a run; the run asked for (None: nothing was stopped, the workspace is idle)."""
        view = self._target(request)
        if view is not None:
            view.refresh_state()  # another server may have just stopped it
        if view is None or view.is_final:
            return view if view is not None and request.run_id else None
        if view.spec.kind == "train" and not request.confirm and not self._announced_checkpoint(view):
            state = view.state
            started = state.started_at if state and state.started_at else view.spec.created_at
            runtime = round(max(0.0, time.time() - started), 1)
            raise ArenaError(
                NO_CHECKPOINT,
                f"run {view.run_id} has announced no checkpoint: stopping it loses "
                f"{runtime:.0f}s of training; pass confirm: true to stop anyway",
                runtimeSeconds=runtime,
            )
        if view.spec.kind == "train" and not request.confirm:
            self._refuse_if_checkpoint_old(view)
        by = f"arena-ls pid {os.getpid()}"
        view.backend.request_stop(view.run_dir, kill=request.kill, grace_seconds=request.grace_seconds, by=by)
        self.wake()
        if not request.wait:
            return view
        grace = request.grace_seconds if request.grace_seconds is not None else view.spec.grace_seconds
        await self._wait_stopped(view, grace + STOP_ANSWER_MARGIN)
        view.read_new_lines(notify=False)
        return view

    async def _wait_stopped(self, view: RunView, timeout: float) -> None:
        """Wait for a stopped run to end, or for its back end to say the stop could not be passed
        on (a cluster's head unreachable): then its refusal at once (the follower keeps asking, and
        follows the run until the stop is delivered or the run is ``lost``)."""

        def undelivered(v: RunView) -> ArenaError | None:
            return v.backend.stop_undelivered(v.spec, v.state)

        if await self.follower.until(view, lambda v: v.is_final or undelivered(v) is not None, timeout):
            self.follower.follow(view, check_liveness=False)  # its last lines and status, told now
        refusal = undelivered(view)
        if refusal is not None and not view.is_final:
            raise refusal

    def _refuse_if_checkpoint_old(self, view: RunView) -> None:
        """1007 for a running trainer whose last checkpoint is too old (``checkpoint_age``)."""
        if view.status is not RunStatus.RUNNING:
            return
        self.follower.follow(view, check_liveness=False)  # the lines up to now, as the poll reads them
        view.read_announcements_of_lines()
        checkpoints = list(view.recent_checkpoints)
        recorded = view.state.last_checkpoint if view.state is not None else None
        if recorded is not None and (not checkpoints or checkpoints[-1][0] != recorded.step):
            checkpoints = [(recorded.step, recorded.at)]  # announced before this view read the log
        step = (
            view.progress.step
            if view.progress.step is not None
            else (view.state.step if view.state else None)
        )
        path = (
            recorded.path
            if recorded is not None
            else (view.seen_checkpoint.path if view.seen_checkpoint else None)
        )
        data = stale_checkpoint_refusal(time.time(), checkpoints, path, step)
        if data is not None:
            raise ArenaError(NO_CHECKPOINT, f"run {view.run_id}: {describe(data)}", **data)

    def _announced_checkpoint(self, view: RunView) -> bool:
        """Has the run's trainer announced a checkpoint? Recorded in the state, or in its log.

        The log counts too: the trainer starts before its agent has loaded, and
        a checkpoint it announces meanwhile reaches the state only once the
        agent has; a client that saw the line must not be told there is none.
        """
        if view.state is not None and view.state.last_checkpoint is not None:
            return True
        self.follower.follow(view, check_liveness=False)  # the lines up to now, as the poll reads them
        view.read_announcements_of_lines()
        return view.seen_checkpoint is not None or (
            view.state is not None and view.state.last_checkpoint is not None
        )

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
        doomed = await asyncio.to_thread(self._prune_history, newest_first, followed, keep, budget)
        for run_id in doomed:
            self.views.pop(run_id, None)
            self.history.forget(run_id)

    def _prune_history(
        self, newest_first: list[str], followed: dict[str, RunView], keep: int, budget: int
    ) -> list[str]:
        """Delete the finished runs past the newest ``keep`` finished ones, then those the log
        budget (``retention.runs_over_budget``) gives up (files only; a damaged run is kept)."""
        doomed: list[str] = []
        kept: dict[str, RunView] = {}
        for run_id in newest_first:
            view = followed.get(run_id) or self.read_view(run_id)
            if view is None or not view.is_final or view.damage is not None:
                continue
            if len(kept) < keep:
                kept[run_id] = view
                continue
            shutil.rmtree(view.run_dir.path, ignore_errors=True)
            doomed.append(run_id)
        for run_id in runs_over_budget([_finished_run(view) for view in kept.values()], budget):
            shutil.rmtree(kept[run_id].run_dir.path, ignore_errors=True)
            doomed.append(run_id)
        return doomed


def _missing_checkpoint(spec: RunSpec, record: CheckpointRecord | None) -> str | None:
    """Why there is no checkpoint file to resume from (None: the file is there)."""
    if record is None:
        return "the job has no recorded checkpoint to resume from"
    path = Path(record.path)
    if not path.is_absolute():
        path = Path(spec.cwd) / path
    if not path.exists():
        return f"its checkpoint {record.path} (step {record.step}) is not on disk"
    return None


def _this_boot() -> BootIdentity:
    """This machine's boot, read from the system (``platform.boot_id``, ``platform.boot_time``)."""
    return BootIdentity(platform.boot_id(), platform.boot_time())


def rollback_spec(settings: Settings) -> RollbackSpec:
    """The loss-spike rollback rules a run keeps from the settings at its start (contract 8.2)."""
    insights = settings.insights
    return RollbackSpec(
        action=insights.loss_spike_action,
        steps_before=insights.rollback_steps_before,
        skip_batches=insights.rollback_skip_batches,
        max_rollbacks=insights.rollback_max,
        window=insights.loss_spike_window,
        mads=insights.loss_spike_mads,
        min_jump=insights.loss_spike_min_jump,
    )


def _finished_run(view: RunView) -> FinishedRun:
    """A finished run as the log budget sees it (its log files' sizes on disk)."""
    sizes = []
    with contextlib.suppress(OSError), os.scandir(view.run_dir.path) as entries:
        for entry in entries:
            if is_log_file(entry.name):
                with contextlib.suppress(OSError):
                    sizes.append(entry.stat().st_size)
    return FinishedRun(view.run_id, view.spec.job_id, view.spec.created_at, sum(sizes))


def launch_evidence(run_dir: RunDir, code: int) -> str:
    """Why an agent died before recording anything: its last log line and the disk's free space."""
    parts = [f"the job agent exited with code {code} before recording the run"]
    try:
        with open(run_dir.agent_log, "rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 4096))
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines()]
        last = next((line for line in reversed(lines) if line), None)
        if last:
            parts.append(last[:300])
    except OSError:
        pass
    try:
        free = shutil.disk_usage(run_dir.path).free
    except OSError:
        free = None
    if free is not None and free < DISK_FULL_BYTES:
        parts.append(f"the state folder's filesystem has {free} bytes free (No space left on device)")
    return "; ".join(parts)


def _trainer_known(view: RunView) -> bool:
    """The run's state records its started trainer, as its back end reads it (a pid here, a
    submission Ray accepted), or the run is already over."""
    state = view.state
    return state is not None and (view.is_final or view.backend.trainer_started(state))


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
