"""A start of a job (contract 7.1), for the supervisor: one manifest snapshot per request, every
refusal in its order (1001, 1006, 1002, 1003, 1011/1012, 1004, 1005, 1009), the run created under
the workspace's lock, its agent started through the run's back end, and the answer once the
trainer runs. ``Starter`` reaches the supervisor only through ``StartSurroundings``.
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
from typing import Any, Protocol

import attrs

from arena_ls import platform
from arena_ls.agent.exec_check import exec_check
from arena_ls.agent.notify_events import notify_spec
from arena_ls.agent.power import power_spec
from arena_ls.agent.resume_args import ResumePathUnknown, path_at, uses_path
from arena_ls.agent.rollback import rollback_spec
from arena_ls.agent.trainer_start import recorded_argv, trainer_argv
from arena_ls.diagnostics import Diag
from arena_ls.errors import (
    ALREADY_RUNNING,
    APPROVAL_REQUIRED,
    DISABLED,
    GATES_FAILED,
    LAUNCH_FAILED,
    PREFLIGHT_FAILED,
    ArenaError,
    InvalidParams,
)
from arena_ls.lifecycle.backends.base import AgentProcess, Backends, Check, RunBackend, RunPlan
from arena_ls.lifecycle.follower import Listener, RunFollower
from arena_ls.lifecycle.gate_verdict import GateVerdict
from arena_ls.lifecycle.jobcheckpoint import JobCheckpoints, JobKnowledge, OverwriteCheck, start_refusal
from arena_ls.lifecycle.probe import probe_job
from arena_ls.lifecycle.reboot import (
    BootReader,
    boot_record,
)
from arena_ls.lifecycle.runrecord import RunRecorder
from arena_ls.lifecycle.runview import DISK_FULL_BYTES, RunView
from arena_ls.manifest import Job, ManifestResult
from arena_ls.manifest.lookup import allowlisted_job
from arena_ls.manifest.model import PYTHON_PLACEHOLDER
from arena_ls.run import agent_records
from arena_ls.run.rundir import CheckpointRecord, Failure, RunDir, RunSpec, RunState
from arena_ls.run.runlock import RunHeld, RunLock, Verdict
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from arena_ls.settings import Settings

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0

START_POLL_MOST = 0.01
"""How often a start looks for the trainer's pid (a stat of state.json): ``launch`` records it
about 50 ms after it was spawned, and ``arena/start`` answers as soon as it sees it."""

HOLDER_WAIT = 5.0
"""How long a refused start waits for the active run's folder to become readable, to show it."""

START_MANIFEST_AGE = 1.0
"""A start checks the manifest as loaded at most this long ago (its paths may have changed since)."""

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


class StartSurroundings(Protocol):
    """What a start uses of the supervisor: the workspace's state folder, lock, runs and back ends."""

    root: Path
    settings: Callable[[], Settings]
    listener: Listener
    gate_checker: GateChecker | None
    preflight: PreflightRunner | None
    backends: Backends
    views: dict[str, RunView]
    follower: RunFollower
    job_checkpoints: JobCheckpoints
    boot: BootReader
    recorder: RunRecorder | None
    prepared: bool

    @property
    def folder(self) -> StateFolder: ...

    @property
    def runlock(self) -> RunLock: ...

    def scan(self, *, list_folder: bool = True) -> None: ...

    def wake(self) -> None: ...

    def latest_view(self, job_id: str | None = None) -> RunView | None: ...

    def notify_if_changed(self, view: RunView) -> None: ...

    def our_pids(self) -> set[int]: ...

    def manifest_path(self) -> Path: ...

    async def load_manifest_async(self, max_age: float | None = None) -> ManifestResult: ...

    async def prune(self) -> None: ...


class Starter:
    """A start of a job's run (``Supervisor.start``): the refusals in their order, the run created
    under the lock, its agent started through its back end, the answer once its trainer runs."""

    def __init__(self, runs: StartSurroundings) -> None:
        self.runs = runs

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
        manifest = await self.runs.load_manifest_async(max_age=START_MANIFEST_AGE)  # off the event loop
        job = allowlisted_job(manifest, request.id)
        if admit is not None:
            admit(job)
        if job.status == "disabled":
            raise ArenaError(DISABLED, f"job {job.id!r} is disabled in the manifest")
        launched = probe_job(job) if request.probe else job
        backend = self.runs.backends.for_job(launched)
        plan = backend.plan(launched, manifest, self.runs.settings())
        command = launched.argv(plan.python)
        """The job's command line, built once: the dry run's answer, the spec and the exec check."""
        if plan.runs_here:  # its sizes are measured in bytes: a 20 MB argument is encoded (a worker's)
            await asyncio.to_thread(self._refuse_a_command_too_long, launched, command)
        verdict = await self.gate_verdict(job)
        gate_errors = verdict.errors
        # The job's checkpoints, read once for the whole start (a record held open past its
        # retries refuses the start: never a guess that there is nothing to resume from).
        knowledge = None if request.probe else JobKnowledge.read(self.runs.folder, job.id, strict=True)
        last = knowledge.last if knowledge is not None else None
        resume_step = None if knowledge is None else self._resume_step(job, request, last)
        resume_path = self._resume_path(launched, resume_step, last)
        if request.dry_run:
            argv = trainer_argv(command, launched.resume_args, resume_step, resume_path)
            return await self._dry_run(launched, plan, argv, gate_errors)
        if job.status == "approval-required" and request.approved is not True:
            verb = "probe" if request.probe else "start"
            raise ArenaError(
                APPROVAL_REQUIRED, f"job {job.id!r} needs approval: {verb} it with approved: true"
            )
        await self._refuse_if_active()
        if knowledge is not None:
            self._refuse_overwrite(job, request, knowledge)
        own_check = await self._own_check(plan) if not gate_errors else None
        warnings = self._refuse_if_unsafe(job, plan, verdict, own_check)
        if launching is not None:
            launching(job)
        fresh = knowledge is not None and job.kind == "train" and request.resume is False
        planned = Planned(backend, plan, command, manifest, verdict.judged())
        record = None
        if self.runs.recorder is not None:
            record = await asyncio.to_thread(  # git is a process: never on the event loop
                self.runs.recorder,
                root=self.runs.root,
                python=plan.python,
                argv=recorded_argv(command, launched.resume_args, resume_step, resume_path),
                manifest=self.runs.manifest_path(),
                settings=self.runs.settings(),
            )
        view = await self._launch(launched, planned, resume_step, knowledge, fresh=fresh, record=record)
        for warning in warnings:
            self.runs.listener.lifecycle(view, agent_records.warning(warning))
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
        if self.runs.gate_checker is None or job.kind != "train":
            return GateVerdict([])
        return await asyncio.to_thread(self.runs.gate_checker, job)

    async def _dry_run(self, job: Job, plan: RunPlan, argv: list[str], gate_errors: list[Diag]) -> DryRun:
        """What a start of ``job`` would run, and what its gates and pre-flight say; nothing starts."""
        checks, _ = self._preflight(job, plan, gate_errors, await self._own_check(plan))
        return DryRun(argv, str(job.resolved_cwd(self.runs.root)), gate_errors, checks)

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
        if self.runs.preflight is None:
            checks: list[Check] = []
            warnings: list[str] = []
        else:
            checks, warnings = self.runs.preflight(job, gate_errors, self.runs.our_pids())
        return plan.checks(checks, own_check), warnings

    @staticmethod
    def _resume_step(job: Job, request: StartRequest, record: CheckpointRecord | None) -> int | None:
        """The step the start resumes from: the request's, else the job's last checkpoint's."""
        if job.kind != "train" or not job.resume_args or request.resume is False:
            return None
        if request.start_step is not None:
            return request.start_step
        if record is None:
            if request.resume is True:
                raise InvalidParams(f"resume: job {job.id!r} has no recorded checkpoint; pass startStep")
            return None
        return record.step

    @staticmethod
    def _resume_path(job: Job, step: int | None, record: CheckpointRecord | None) -> str | None:
        """The path ``{path}`` resumes from: the job's recorded checkpoint at ``step``.

        A job whose ``resume.args`` name ``{path}``, asked to resume at a step whose
        checkpoint path is not known (a confirmed ``startStep`` of another checkpoint),
        is refused here: the trainer is never told a literal ``{path}``.
        """
        if step is None:
            return None
        path = path_at(step, [record])
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
            last_run=self.runs.latest_view(job.id),
        )
        refusal = start_refusal(check)
        if refusal is not None:
            raise refusal

    async def _refuse_if_active(self) -> None:
        """Refuse early (before gates and pre-flight) while the lock's holder lives."""
        self.runs.scan()
        judgement = self.runs.runlock.judge_now()
        if judgement is not None and judgement.verdict is Verdict.HELD:
            raise await self._already_running(RunHeld(judgement.run_id, judgement.reason))

    async def _already_running(self, held: RunHeld) -> ArenaError:
        """1003 with the active run (waiting a moment for a run that is just being created)."""
        view = None
        deadline = time.monotonic() + HOLDER_WAIT
        while held.run_id is not None:
            self.runs.scan()
            view = self.runs.views.get(held.run_id)
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
        """Create the run (``RunLock.claim``), start it through its back end, record its agent.

        ``planned`` is what the start decided from its manifest snapshot; ``knowledge`` (the
        job's checkpoints) goes to the run's spec; ``fresh`` (a start with ``resume: false``)
        begins the job anew before the agent can announce anything."""
        knowledge = knowledge or JobKnowledge(None, [])
        await self.runs.prune()
        settings = self.runs.settings()
        backend, plan = planned.backend, planned.plan
        specs: list[RunSpec] = []
        allowed_roots = [str(self.runs.root.resolve()), *(str(folder) for folder in planned.manifest.roots)]
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
                cwd=str(job.resolved_cwd(self.runs.root)),
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
                boot=boot_record(self.runs.boot()) if plan.runs_here else None,
                record=record,
            )
            specs.append(spec)
            return spec

        try:
            run_dir = self.runs.runlock.claim(job.id, build)
        except RunHeld as held:
            raise await self._already_running(held) from held
        except OSError as error:
            evidence = f"the run could not be created in {self.runs.folder.root}: {error}"
            raise ArenaError(LAUNCH_FAILED, evidence, evidence=evidence) from error
        spec = specs[-1]
        self.runs.prepared = False  # the start takes what idle got ready (or lets it go)
        if fresh:
            self._begin_anew(job.id, spec.run_id)
        try:
            agent = backend.start(run_dir, self.runs.root)
        except OSError as error:
            if fresh and knowledge.last is not None:  # nothing ran: the job's last checkpoint stands
                with contextlib.suppress(OSError):
                    self.runs.folder.record_job_checkpoint(job.id, knowledge.last)
            self.runs.runlock.release(spec.run_id)
            shutil.rmtree(run_dir.path, ignore_errors=True)  # nothing ran: leave nothing
            evidence = f"could not start the job agent: {error}"
            raise ArenaError(LAUNCH_FAILED, evidence, evidence=evidence) from error
        try:
            self.runs.runlock.record_agent(spec.run_id, agent.pid, platform.process_identity(agent.pid))
        except OSError as error:  # the lock still names its creator; the agent's state takes over
            log.warning("could not record the agent in the lock: %s", error)
        view = RunView(run_dir, spec, agent, backend=backend)
        self.runs.views[spec.run_id] = view
        self.runs.wake()
        return view

    def _begin_anew(self, job_id: str, run_id: str) -> None:
        """``resume: false``: the job has no last checkpoint from now on (a failed write is logged:
        the run's own first checkpoint replaces the record anyway)."""
        try:
            self.runs.folder.begin_job_anew(job_id, run_id)
        except OSError as error:
            log.warning("could not record that job %s begins anew: %s", job_id, error)

    def _exec_check(
        self, job: Job, command: list[str], roots: list[str], judged: dict[str, str]
    ) -> dict[str, Any] | None:
        """The gated paths whatever execs the trainer checks again right before it (issue 24),
        inside ``roots``: the workspace, then the manifest's ``roots`` (contract 7.3). Only for a
        trainer that runs on this machine (a cluster's runs from the package its agent submits)."""
        command_is_path = job.command != PYTHON_PLACEHOLDER and ("/" in job.command or os.sep in job.command)
        return exec_check(
            str(job.resolved_cwd(self.runs.root)),
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
        await self.runs.follower.until(
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
        self.runs.notify_if_changed(view)
        return view

    def _start_again(self, view: RunView, failed: AgentProcess) -> bool:
        """The run's agent died before it recorded a trainer: start another where the back end
        can prove nothing of the run started (a spare agent that died before it took the run).

        Done in one turn of the lock, which must still be this run's: the lock
        named the dead agent, so another server may have taken the workspace.
        """
        try:
            again = self.runs.runlock.replace_agent(
                view.run_id, lambda: view.backend.start_again(view.run_dir, self.runs.root, failed)
            )
        except OSError as error:
            log.warning("run %s: could not start its agent again: %s", view.run_id, error)
            return False
        if again is None:
            return False
        view.agent, view.agent_exit = again, None
        self.runs.wake()
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
        self.runs.runlock.release(view.run_id)
        self.runs.notify_if_changed(view)
        return ArenaError(
            LAUNCH_FAILED,
            f"the run could not be started: {evidence}",
            evidence=evidence,
            runId=view.run_id,
        )


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
