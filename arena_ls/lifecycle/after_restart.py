"""After a restart of the machine (contract 8.3), for the supervisor: what each interrupted run
offers (``RunInfo.afterReboot``), which may still be resumed, and the one resume of each, through
every gate and pre-flight check of a start (``lifecycle/reboot.py`` keeps the pure rules and the
run folder's once-only files).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import attrs

from arena_ls.agent.resume_args import uses_path
from arena_ls.errors import (
    ArenaError,
    InvalidParams,
)
from arena_ls.lifecycle.reboot import (
    BOOT_TOLERANCE,
    AfterReboot,
    BootReader,
    after_reboot,
    interrupted_by_restart,
    record_resumed,
)
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.starter import DryRun, StartRequest
from arena_ls.run.rundir import CheckpointRecord, RunSpec
from arena_ls.settings import Settings

log = logging.getLogger(__name__)


class RestartSurroundings(Protocol):
    """What the resume after a restart uses of the supervisor: its runs, settings, boot and starts."""

    settings: Callable[[], Settings]
    views: dict[str, RunView]
    boot: BootReader

    def job_checkpoint(self, job_id: str) -> CheckpointRecord | None: ...

    def latest_view(self, job_id: str | None = None) -> RunView | None: ...

    def notify_if_changed(self, view: RunView) -> None: ...

    async def start(self, request: StartRequest) -> RunView | DryRun: ...


class AfterRestart:
    """The runs a restart of the machine interrupted (contract 8.3): their offer, and the one
    automatic resume of each (``watchdog.afterReboot``)."""

    def __init__(self, runs: RestartSurroundings) -> None:
        self.runs = runs

    def after_reboot(self, view: RunView) -> AfterReboot | None:
        """What a run the machine's restart interrupted offers (None: the restart did not end it)."""
        if not interrupted_by_restart(view.state):
            return None
        record = self.runs.job_checkpoint(view.spec.job_id) if view.spec.kind == "train" else None
        latest = self.runs.latest_view(view.spec.job_id)
        newer = latest.run_id if latest is not None and latest.run_id != view.run_id else None
        policy = self.runs.settings().watchdog_after_reboot
        offered = after_reboot(view.run_dir, policy, record.step if record is not None else None, newer)
        if record is not None and record.path and uses_path(view.spec.resume_args):
            offered = attrs.evolve(offered, path=record.path)  # the step alone would mislead
        return offered

    def interrupted_runs(self) -> list[RunView]:
        """The runs a restart of this boot interrupted that may still be resumed (an offer stands,
        nothing resumed them, no resume was tried): the candidates of ``watchdog.afterReboot``."""
        boot_time = self.restart_boot_time()
        found = []
        for view in list(self.runs.views.values()):
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
            return self.runs.boot().boot_time
        except Exception:
            log.exception("reading the machine's boot failed")
            return None

    async def resume_after_restart(self, view: RunView) -> RunView | None:
        """Resume a run the restart interrupted (its caller holds the run's once-only claim):
        a start of its job with resume, through every gate and pre-flight check, from the job's
        last checkpoint once its file is found. What stops it is recorded in the run's
        ``after-reboot.json`` (the clients show it beside the offer); never tried again here."""
        job_id = view.spec.job_id
        record = self.runs.job_checkpoint(job_id)
        problem = _missing_checkpoint(view.spec, record)
        if problem is None and record is not None:
            request = StartRequest(id=job_id, approved=True, resume=True, start_step=record.step)
            try:
                started = await self.runs.start(request)
            except (ArenaError, InvalidParams) as error:
                problem = f"the resume after the restart was refused: {error}"
            else:
                if isinstance(started, RunView):
                    record_resumed(view.run_dir, started.run_id, step=record.step)
                    log.info("run %s: resumed after the restart as run %s", view.run_id, started.run_id)
                    return started
        log.warning("run %s: %s", view.run_id, problem)
        record_resumed(view.run_dir, None, problem)
        self.runs.notify_if_changed(view)
        return None


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
