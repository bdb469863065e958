"""The workspace's state folder (``.aide/training``): its runs, and each job's record of its
checkpoints across runs (``jobs/<jobId>.json``: the last one, its history, every path announced).
A run's own folder is ``rundir.RunDir``."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import cattrs

from arena_ls.run.atomicfile import write_json_atomic
from arena_ls.run.rundir import (
    MAX_STEP,
    CheckpointRecord,
    CorruptState,
    RunDir,
    read_json,
    structure,
    unstructure,
)

log = logging.getLogger(__name__)


Report = Callable[[str], None]


STATE_GITIGNORE = (
    "# Written by arena-ls when it created this state folder: its runs, logs and locks\n"
    "# are not sources, so git ignores all of it. Delete this file to have git see them.\n"
    "*\n"
)


def make_state_folder(root: Path) -> None:
    """Create the state folder; when this call creates it, also a ``.gitignore`` of ``*``
    in it, so it never shows in the workspace's ``git status``. A folder that already
    existed (a ``stateDir`` the user chose, the workspace itself) is left as it is."""
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    if created:
        with contextlib.suppress(OSError):
            (root / ".gitignore").write_text(STATE_GITIGNORE, encoding="utf-8")


@attrs.define
class StateFolder:
    """The workspace's state folder.

    ``report`` is told, once per problem, about damage found and repaired or
    ignored here (the server shows it as a warning); ``runlock`` owns the
    lock and the creation of runs.
    """

    root: Path
    report: Report | None = attrs.field(default=None, eq=False, repr=False)
    _reported: set[str] = attrs.field(factory=set, eq=False, repr=False)

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def lock_path(self) -> Path:
        return self.root / "active.lock"

    def warn_once(self, key: str, message: str) -> None:
        """Log (stderr) and report a problem, once per ``key`` for this folder object."""
        if key in self._reported:
            return
        self._reported.add(key)
        log.warning("%s", message)
        if self.report is not None:
            self.report(message)

    def ensure(self) -> None:
        """Create the folder; a ``runs`` or ``jobs`` that is not a folder is moved aside."""
        make_state_folder(self.root)
        for sub in (self.runs_dir, self.root / "jobs"):
            try:
                sub.mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                aside = sub.with_name(f"{sub.name}.damaged-{secrets.token_hex(4)}")
                os.replace(sub, aside)
                sub.mkdir()
                self.warn_once(f"moved:{sub}", f"{sub} was not a folder; moved it aside to {aside.name}")

    def list_runs(self) -> list[RunDir]:
        """Every run folder, oldest first (runs being built, named ``.new-*``, are not runs yet)."""
        try:
            entries = [p for p in self.runs_dir.iterdir() if not p.name.startswith(".") and p.is_dir()]
        except FileNotFoundError:
            return []
        except NotADirectoryError:  # ``runs`` is a file: moved aside (reported once), nothing listed
            self.ensure()
            return []
        except OSError as error:  # unreadable: no run can be listed
            self.warn_once(f"runs:{self.runs_dir}", f"{self.runs_dir} cannot be listed: {error}")
            return []
        entries.sort(key=lambda p: (_created(p), p.name))
        return [RunDir(p) for p in entries]

    # -- checkpoints across runs ---------------------------------------------------------

    def job_record_path(self, job_id: str) -> Path:
        return self.root / "jobs" / f"{job_id}.json"

    def record_job_checkpoint(self, job_id: str, checkpoint: CheckpointRecord, keep: int = 8) -> None:
        """Make ``checkpoint`` the job's last one, add its path to the paths the job saved, and keep
        the job's last ``keep`` announcements (``checkpoint.history``) in its ``history``."""
        recorded = self._job_payload(job_id)
        paths = _with_path(_recorded_paths(recorded), checkpoint.path)
        announced = unstructure(checkpoint)
        history = [*_recorded_history(recorded), _checked_entry(announced)][-max(1, keep) :]
        payload = {**announced, "paths": paths, "history": history}
        self._make_jobs_folder()
        write_json_atomic(self.job_record_path(job_id), payload)

    def begin_job_anew(self, job_id: str, run_id: str) -> None:
        """A start with ``resume: false``: the job has no last checkpoint any more (its paths stay
        known: a file there is the old lineage's, which a crash must not overwrite unasked)."""
        paths = _with_path(_recorded_paths(self._job_payload(job_id)), None)
        payload = {"fresh": True, "runId": run_id, "at": time.time(), "paths": paths}
        self._make_jobs_folder()
        write_json_atomic(self.job_record_path(job_id), payload)

    def _make_jobs_folder(self) -> None:
        """``jobs`` inside a state folder that exists, never the folders above it: an agent whose
        workspace was moved a moment ago (its folder watch follows within a second) must not
        bring the old path back, a ``ws/.aide/training/jobs`` where the user moved ``ws`` away."""
        (self.root / "jobs").mkdir(exist_ok=True)

    def job_history(self, job_id: str) -> list[CheckpointRecord]:
        """The job's last announced checkpoints (``checkpoint.history`` of them), oldest first; empty
        when it began anew, and each damaged entry left out."""
        history: list[CheckpointRecord] = []
        for entry in _recorded_history(self._job_payload(job_id)):
            with contextlib.suppress(cattrs.BaseValidationError, TypeError, KeyError, ValueError):
                record = structure(entry, CheckpointRecord)
                if 0 <= record.step <= MAX_STEP:
                    history.append(record)
        return history

    def job_paths(self, job_id: str) -> list[str]:
        """Every checkpoint path a run of the job announced (the last ``MAX_JOB_PATHS``), newest last."""
        return _with_path(_recorded_paths(self._job_payload(job_id)), None)

    def _job_payload(self, job_id: str) -> dict[str, Any]:
        """The job's record as read (a missing or damaged one: empty, its damage reported elsewhere)."""
        try:
            payload = read_json(self.job_record_path(job_id))
        except (OSError, CorruptState):
            return {}
        return payload if isinstance(payload, dict) else {}

    def job_checkpoint(self, job_id: str) -> CheckpointRecord | None:
        """The job's last recorded checkpoint; None when the job began anew (``resume: false``),
        and None (reported once) when the record is damaged."""
        path = self.job_record_path(job_id)
        try:
            payload = read_json(path)
            if isinstance(payload, dict) and payload.get("fresh") is True:
                return None
            step = payload.get("step") if isinstance(payload, dict) else None
            if not isinstance(step, int) or isinstance(step, bool):
                raise CorruptState(f"its step is {str(step)[:40]!r}, not a whole number")
            record = structure(payload, CheckpointRecord)
        except FileNotFoundError:
            return None
        except (CorruptState, cattrs.BaseValidationError, TypeError, KeyError, ValueError) as error:
            self.warn_once(f"job:{path}", f"{path} is damaged and was ignored: {_short(error)}")
            return None
        if not 0 <= record.step <= MAX_STEP:
            self.warn_once(
                f"job:{path}", f"{path} records step {record.step}, which no trainer reached; ignored"
            )
            return None
        return record


MAX_JOB_PATHS = 32
"""How many distinct checkpoint paths a job's record keeps (a trainer naming each save anew)."""


def _recorded_paths(payload: dict[str, Any]) -> list[object]:
    """A record's paths, the last checkpoint's included (a record older than ``paths`` has only it)."""
    paths = payload.get("paths")
    listed: list[object] = list(paths) if isinstance(paths, list) else []
    last = payload.get("path")
    if isinstance(last, str) and last not in listed:
        listed.append(last)
    return listed


def _recorded_history(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's ``history`` entries that look like checkpoints, its last checkpoint always among
    them (a record older than ``history``, or one whose history is damaged); none after a fresh start."""
    if payload.get("fresh") is True:
        return []
    history = payload.get("history")
    listed = [e for e in history if isinstance(e, dict)] if isinstance(history, list) else []
    entries = [e for e in listed if _is_step(e.get("step")) and isinstance(e.get("path"), str)]
    step, path = payload.get("step"), payload.get("path")
    if (
        _is_step(step)
        and isinstance(path, str)
        and not any((e["step"], e["path"]) == (step, path) for e in entries)
    ):
        keys = ("step", "path", "at", "runId", "bytes", "sha256")
        entries.append({k: payload[k] for k in keys if k in payload})
    return entries


def _is_step(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _checked_entry(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if value is not None}


def _with_path(recorded: object, path: str | None) -> list[str]:
    """The recorded paths (strings only, each once), ``path`` moved to the end, the newest kept."""
    paths = [p for p in recorded if isinstance(p, str)] if isinstance(recorded, list) else []
    if path is not None:
        paths = [p for p in paths if p != path] + [path]
    unique = list(dict.fromkeys(paths))
    return unique[-MAX_JOB_PATHS:]


def _created(path: Path) -> float:
    try:
        return (path / "spec.json").stat().st_mtime
    except OSError:
        return 0.0


def _short(error: BaseException) -> str:
    text = str(error).replace("\n", " ")
    return text if len(text) <= 200 else text[:200] + "…"
