"""Every run of the workspace, newest first, without holding each one in memory (contract 7.2).

The supervisor follows a ``RunView`` for each unfinished run and for the
newest finished ones (``KEEP_VIEWS``); the rest of the history is only this
index: each run folder's id and creation time (a few dozen bytes a run, read
from the folder listing and the ``spec.json`` stamps). The index is listed
again only when the ``runs`` folder changes (a run created, pruned or moved
in): one ``stat`` otherwise, however long the history; and then only a new
run's ``spec.json`` is looked at.
"""

from __future__ import annotations

import bisect
import itertools
import os
from pathlib import Path
from typing import NamedTuple

KEEP_VIEWS = 64
"""Finished runs whose views stay in memory (the newest; ``arena/status`` shows 50 by default)."""

Signature = tuple[int, int, int] | None


class _Listing(NamedTuple):
    """One reading of the runs folder (replaced whole: a worker thread may read the next one)."""

    entries: list[tuple[float, str]]
    created: dict[str, float]
    signature: Signature
    root: Path | None


class RunHistory:
    """The run folders of a state folder, oldest first, as (created, run id).

    ``refresh`` may run on a worker thread (it reads files only, and replaces
    the listing in one assignment): the follower lists a changed folder there,
    since listing 5,000 runs took the event loop 10 ms of CPU (issue 24).
    ``version`` changes with each listing, for the readers that act on one."""

    def __init__(self) -> None:
        self._listing = _Listing([], {}, None, None)
        self._versions = itertools.count(1)
        self.version = 0

    @property
    def entries(self) -> list[tuple[float, str]]:
        return self._listing.entries

    def refresh(self, runs_dir: Path, *, force: bool = False) -> bool:
        """Read the folder again if it changed since the last call; True when it was read."""
        last = self._listing
        signature = _signature(runs_dir)
        if not force and signature is not None and signature == last.signature and runs_dir == last.root:
            return False
        known = last.created if runs_dir == last.root else {}
        created: dict[str, float] = {}
        try:
            with os.scandir(runs_dir) as listing:
                for entry in listing:
                    if entry.name.startswith(".") or not entry.is_dir():
                        continue
                    stamp = known.get(entry.name)
                    if stamp is None or stamp == 0.0:  # only a new run's spec is looked at
                        stamp = _created(Path(entry.path))
                    created[entry.name] = stamp
        except OSError:
            created = {}
        entries = sorted((stamp, run_id) for run_id, stamp in created.items())
        self._listing = _Listing(entries, created, signature, runs_dir)
        self.version = next(self._versions)
        return True

    def __len__(self) -> int:
        return len(self._listing.entries)

    def newest(self, count: int) -> list[str]:
        """The ids of the newest ``count`` runs, newest first."""
        return [run_id for _, run_id in reversed(self._listing.entries[-count:])] if count > 0 else []

    def created(self, run_id: str) -> float | None:
        return self._listing.created.get(run_id)

    def before(self, key: tuple[float, str] | None, count: int) -> list[str]:
        """The ids of the ``count`` runs just older than ``key`` (None: the newest), newest first."""
        entries = self._listing.entries
        end = len(entries) if key is None else bisect.bisect_left(entries, key)
        return [run_id for _, run_id in reversed(entries[max(0, end - count) : end])]

    def add(self, created: float, run_id: str) -> None:
        """A run this server just created (seen before the next listing)."""
        listing = self._listing
        if run_id not in listing.created:
            bisect.insort(listing.entries, (created, run_id))
            listing.created[run_id] = created

    def forget(self, run_id: str) -> None:
        listing = self._listing
        created = listing.created.pop(run_id, None)
        if created is not None:
            index = bisect.bisect_left(listing.entries, (created, run_id))
            if index < len(listing.entries) and listing.entries[index] == (created, run_id):
                del listing.entries[index]


def _signature(path: Path) -> Signature:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_ino, stat.st_nlink)


def _created(path: Path) -> float:
    """When the run was created, as ``StateFolder.list_runs`` orders them (its spec's stamp)."""
    try:
        return os.stat(path / "spec.json").st_mtime
    except OSError:
        return 0.0
