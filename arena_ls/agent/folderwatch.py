"""The agent keeps an eye on its run folder: moved, it follows; deleted, it stops the trainer.

A workspace folder moved while a run is live (``mv ws ws2``) leaves the agent
working from paths that no longer exist: a server at the new path would write
its stop request where the agent never looks. The agent holds its run folder
open (``platform.open_folder``) and, about once a second, asks where it is
(``platform.folder_now``): at a new place, the agent carries on there (its
state, stop requests and job records at the new path). Gone for good (the
folder deleted), nobody can follow the run any more: the agent stops the
trainer cooperatively (the stop signal, then the kill at the grace window's
end) and says so on its stderr. So it does when the run folder itself was
renamed or moved out of its runs folder, or another folder was made in its
place (issue 39): no server lists a run by any other name, and a run no one
can list would hold the workspace's lock for the trainer's whole life
(``follows_the_workspace``).
"""

from __future__ import annotations

from pathlib import Path

import attrs

from arena_ls import platform

LISTED_PARTS = 4
"""``.aide/training/runs/<runId>``: the tail of a run folder's path that a server lists it by."""
CHECK_SECONDS = 1.0
"""How often the run folder's place is checked (one ``stat`` while it stays put)."""


@attrs.frozen
class Moved:
    path: Path


@attrs.frozen
class Gone:
    path: Path


Change = Moved | Gone


class FolderWatch:
    """Where one run folder is; ``check`` answers a change once (then follows the new place)."""

    def __init__(self, path: Path, handle: platform.FolderHandle = -1) -> None:
        """``handle``: the folder as opened earlier (``launch`` opens it before the trainer starts)."""
        self.path = path
        self.handle = handle if handle >= 0 else platform.open_folder(path)
        self.gone = False
        self._next_check = 0.0

    def check_now(self) -> None:
        """The next ``check`` looks at once (a read found a file where the folder was)."""
        self._next_check = 0.0

    def check(self, now: float) -> Change | None:
        """None while the folder stays put (or was already reported gone), else what happened."""
        if self.gone or now < self._next_check:
            return None
        self._next_check = now + CHECK_SECONDS
        where = platform.folder_now(self.handle, self.path)
        if where == self.path:
            return None
        if where is None:
            self.gone = True
            return Gone(self.path)
        self.path = where
        return Moved(where)


def follows_the_workspace(before: Path, now: Path) -> bool:
    """Whether a run folder moved from ``before`` to ``now`` is still where a server finds it: the
    workspace (or a folder above it) moved, and the folder's tail (``.aide/training/runs/<runId>``)
    is the same. Otherwise the run folder itself was renamed or moved elsewhere."""
    return now.parts[-LISTED_PARTS:] == before.parts[-LISTED_PARTS:]
