"""One lock for the imports a job agent makes once the trainer's output is being copied.

The agent starts the trainer and the pumps that copy its output before it loads the rest of
itself (``agent/launch.py``), and a pump loads ``logkeep`` the first time a capped log drops a
segment. CPython imports each module under a lock of its own, but two threads importing a
package whose ``__init__`` imports its own submodules (attrs: ``attr`` and ``attr._make``) can
be handed a partially initialized module: issue 38's CI saw a pump die of ``ImportError: cannot
import name 'NOTHING' from partially initialized module 'attr._make'`` while the agent loaded
itself; the trainer then blocked on its full pipe and was stopped as stalled. So the agent's
late loading and the log's late import both happen under ``LOCK``, one at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

LOCK = threading.RLock()
"""Held while importing after the pumps started: the agent's own loading, the log's ``logkeep``."""


def keep_filters(
    progress_pattern: object, checkpoint_pattern: object
) -> tuple[Callable[[bytes, bool], bool], Callable[[bytes], bool]]:
    """``logkeep.event_filters``, imported under ``LOCK``: what a capped log's drop keeps."""
    with LOCK:
        from arena_ls.run.logkeep import event_filters

    return event_filters(progress_pattern, checkpoint_pattern)
