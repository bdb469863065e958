"""A job's checkpoints across its runs (contract 7.1): what a start and ``arena/status`` know.

The record is ``jobs/<jobId>.json`` in the state folder, an index the agents
keep: every checkpoint a run of the job announces (or its
``checkpoint.pattern`` matches) is written there as the job's last one, with
the run that announced it, and its path joins the paths the job has saved
(``StateFolder.record_job_checkpoint``). A start with ``resume: false``
begins the job anew (``StateFolder.begin_job_anew``): no last checkpoint, the
paths still known. So no status ever rescans the runs' files: ``JobCheckpoints``
reads each job's record again only when its file changed (its signature).

A start hands the job's knowledge to the run in its spec (``job_checkpoint``,
``checkpoint_paths``), where the relaunch policy (``relaunch.py``) uses it; a
start that would overwrite (``start_refusal``) is refused unless confirmed.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from arena_ls import platform
from arena_ls.errors import ALREADY_FINISHED, CHECKPOINT_MISMATCH, ArenaError
from arena_ls.lifecycle.runview import RunView
from arena_ls.run.rundir import CheckpointRecord, RunState, StateBusy
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

Signature = tuple[int, int, int, int] | None


@attrs.frozen
class JobKnowledge:
    """What the state folder knows of a job's checkpoints when a run of it starts."""

    last: CheckpointRecord | None
    """``JobInfo.lastCheckpoint``: None before any, and after a start that began the job anew."""
    paths: list[str]
    """Every path a run of the job announced (bounded), newest last."""
    history: list[CheckpointRecord] = attrs.field(factory=list)
    """The job's last announced checkpoints (``checkpoint.history``), oldest first (contract 8.2)."""

    @classmethod
    def read(cls, folder: StateFolder, job_id: str, *, strict: bool = False) -> JobKnowledge:
        """The job's record as it is; held open (Windows) past the retries, nothing is known, or
        (``strict``, a start deciding where to resume) ``StateBusy`` is raised."""
        try:
            return cls(folder.job_checkpoint(job_id), folder.job_paths(job_id), folder.job_history(job_id))
        except StateBusy:  # what the agents recorded is kept
            if strict:
                raise
            return cls(None, [])

    def history_for_run(self, resume_step: int | None) -> list[CheckpointRecord]:
        """The job's history a run resuming from ``resume_step`` may fall back to (``RunSpec.job_history``):
        none on a fresh start; on a resume, the recorded checkpoints up to that step."""
        if resume_step is None:
            return []
        return [record for record in self.history if record.step <= resume_step]

    def for_run(self, resume_step: int | None) -> CheckpointRecord | None:
        """The checkpoint a run started from ``resume_step`` takes over (``RunSpec.job_checkpoint``).

        The job's last one when the run resumes from its step; None on a fresh start
        (the job begins anew) and on a start at another step a person confirmed (the
        run's own start step is then where a relaunch goes back to)."""
        if resume_step is None or self.last is None or self.last.step != resume_step:
            return None
        return self.last


class JobCheckpoints:
    """Each job's last checkpoint for ``JobInfo``, read again only when its record changed.

    One ``stat`` per job per status, however many runs the history holds.
    """

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], tuple[Signature, CheckpointRecord | None]] = {}
        self._paths: dict[tuple[str, str], Path] = {}
        """Each job's record path, made once (a status asks for every job's)."""

    def last(self, folder: StateFolder, job_id: str) -> CheckpointRecord | None:
        key = (str(folder.root), job_id)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = folder.job_record_path(job_id)
        signature = platform.file_signature(path)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1]  # unchanged, or still no record (most jobs of a large manifest)
        try:
            record = folder.job_checkpoint(job_id)
        except StateBusy:  # held open a moment (Windows): the last reading stands
            return cached[1] if cached is not None else None
        self._cache[key] = (signature, record)
        return record


@attrs.frozen
class OverwriteCheck:
    """What ``start_refusal`` looks at: the request, and the job's knowledge and last run."""

    kind: str
    resume: bool | str
    start_step: int | None
    confirm: bool
    last: CheckpointRecord | None
    last_run: RunView | None
    """The job's newest run, if any (``already-finished`` looks at it)."""


def start_refusal(check: OverwriteCheck) -> ArenaError | None:
    """1011 or 1012 when a start would overwrite what the job has saved, unless confirmed."""
    if check.kind != "train" or check.confirm:
        return None
    asked, last = check.start_step, check.last
    if asked is not None and check.resume is not False and (last is None or asked != last.step):
        where = (
            f"the job's last checkpoint is at step {last.step} ({last.path})"
            if last
            else "the job has no known checkpoint"
        )
        return ArenaError(
            CHECKPOINT_MISMATCH,
            f"startStep {asked} is not the job's last checkpoint: {where}; "
            "pass confirm: true to start there anyway",
            asked=asked,
            lastCheckpoint=last,
        )
    view = check.last_run
    if check.resume is not False and view is not None and finished_all_steps(view.state):
        total = view.state.total_steps if view.state is not None else None
        return ArenaError(
            ALREADY_FINISHED,
            f"the job's last run {view.run_id} finished all its {total} steps; "
            "pass resume: false to train anew, or confirm: true",
            run=view,  # the protocol layer sends it as its RunInfo
        )
    return None


def finished_all_steps(state: RunState | None) -> bool:
    """The run succeeded at its last step (``step == totalSteps``)."""
    if state is None or state.status is not RunStatus.SUCCEEDED or not state.total_steps:
        return False
    step = state.step
    if state.last_checkpoint is not None:
        step = max(step or 0, state.last_checkpoint.step)
    return step == state.total_steps
