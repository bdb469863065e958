"""A stop request that needs no data blocks: what it asks is in the names of empty files.

``stop.json`` is written by a temporary file renamed over it, which needs a
data block; on a disk that was full before the run started there is none,
and the request used to become an empty ``stop.json`` (a stop with the job's
defaults: a cooperative stop and its whole grace window, where the person
asked for a kill). An empty file needs no data block, only a name in its
folder. So on a full disk the request is said by names: ``stop.kill`` (a
kill), ``stop.grace-<seconds>`` (the grace window asked for), then the empty
``stop.json`` that tells the agent to look (issue 39 item 7). A kill asked
for after a first stop (an escalation, whose ``stop.json`` cannot be written
again) is ``stop.kill`` too.

Standard library only: the launcher reads it before the agent has loaded.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any

KILL_MARK = "stop.kill"
GRACE_PREFIX = "stop.grace-"
REQUEST_NAME = "stop.json"


def mark_stop(run_folder: Path, *, kill: bool, grace_seconds: float | None) -> None:
    """Ask for a stop with empty files only (the request's JSON could not be written)."""
    if kill:
        _touch(run_folder / KILL_MARK)
    if grace_seconds is not None and math.isfinite(grace_seconds) and grace_seconds >= 0:
        _touch(run_folder / f"{GRACE_PREFIX}{grace_seconds:g}")
    _touch(run_folder / REQUEST_NAME)  # last: the agent acts on it, and reads the marks then


def with_marks(run_folder: Path, request: dict[str, Any]) -> dict[str, Any]:
    """``request`` (``stop.json``'s, ``{}`` when it is empty) with what the marks ask added."""
    if not request.get("kill") and (run_folder / KILL_MARK).exists():
        request = {**request, "kill": True}
    if request.get("graceSeconds") is None:
        grace = _grace_mark(run_folder)
        if grace is not None:
            request = {**request, "graceSeconds": grace}
    return request


def _grace_mark(run_folder: Path) -> float | None:
    try:
        names = [entry.name for entry in os.scandir(run_folder) if entry.name.startswith(GRACE_PREFIX)]
    except OSError:
        return None
    for name in sorted(names):
        with contextlib.suppress(ValueError):
            grace = float(name[len(GRACE_PREFIX) :])
            if math.isfinite(grace) and grace >= 0:
                return grace
    return None


def _touch(path: Path) -> None:
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
