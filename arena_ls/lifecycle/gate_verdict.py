"""What the gates said about the bytes a start is about to run (issue 39 item 4).

A start asks the gates for a ``GateVerdict``: the trainer file is read and
hashed once, at the start, whatever the gate cache believes about its size,
modification time and inode (``cp -p``, ``rsync -t`` and ``tar`` all put an
mtime back after rewriting a file in place). The digest of the bytes judged
goes into the run's ``execCheck``, and what execs the trainer compares the
file with it right before the exec: the gates and the launch judge the same
bytes, and a swap in between is refused with the evidence.
"""

from __future__ import annotations

import dataclasses

from arena_ls.diagnostics import Diag


@dataclasses.dataclass(frozen=True, slots=True)
class GateVerdict:
    """The error-severity gate diagnostics of a trainer as read now, and what was read."""

    errors: list[Diag]
    """Empty: the trainer passes."""
    path: str | None = None
    """The trainer file judged (its resolved path), None when there is none to judge."""
    digest: str | None = None
    """SHA-256 of the bytes the gates judged (what the exec-time check compares)."""
    changed_unseen: bool = False
    """The file's content differs from what the gate cache last read though its size,
    modification time and inode did not change: the trainer was rewritten behind them."""

    def judged(self) -> dict[str, str]:
        """The digest of each file judged, by path (``exec_check``'s ``judged``)."""
        if self.path is None or self.digest is None:
            return {}
        return {self.path: self.digest}
