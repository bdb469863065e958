"""Looking for a file the trainer saved, when no checkpoint step is known (``resume-unknown``).

The relaunch policy (``relaunch.py``) is pure; this is the one place that
looks at the disk for it, only after a crash with no known checkpoint. A path
announced by any run of the job counts when it exists; so does a file like it
(the same suffix) in its folder, since trainers often name each save anew
(``ckpt-600.pt``). The look is bounded: a few paths, a few hundred entries of
each folder.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

FOLDER_ENTRIES_LOOKED_AT = 500
"""Of each checkpoint folder, how many entries are looked at (a huge folder costs no more)."""
NOT_CHECKPOINTS = frozenset({".py", ".pyc", ".txt", ".md", ".log", ".tmp"})
"""Suffixes of files that are never taken for a checkpoint like an announced one."""


def find_saved_file(cwd: Path, paths: Iterable[str]) -> str | None:
    """The first announced path (newest first) that exists, else a file like one in its folder."""
    ordered = list(dict.fromkeys(reversed(list(paths))))
    for path in ordered:
        if _resolve(cwd, path).is_file():
            return path
    for path in ordered:
        found = _like(_resolve(cwd, path))
        if found is not None:
            return str(found)
    return None


def _resolve(cwd: Path, path: str) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() else cwd / candidate


def _like(announced: Path) -> Path | None:
    """A file in ``announced``'s folder with its suffix (none when it has no suffix worth matching)."""
    suffix = announced.suffix.lower()
    if not suffix or suffix in NOT_CHECKPOINTS:
        return None
    with contextlib.suppress(OSError), os.scandir(announced.parent) as entries:
        for index, entry in enumerate(entries):
            if index >= FOLDER_ENTRIES_LOOKED_AT:
                break
            if entry.name.lower().endswith(suffix) and entry.is_file():
                return announced.parent / entry.name
    return None
