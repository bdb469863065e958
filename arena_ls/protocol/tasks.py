"""Background work of the server: every task goes through one ``TaskRunner.run_task``.

The event loop keeps only a weak reference to a task, so a task nobody holds
may be collected before it finishes; and an exception in a task nobody awaits
is never seen. ``run_task`` holds each task until it is done and logs its
failure, with the traceback, on stderr (never on the client's stdout).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class TaskRunner:
    """Starts background tasks, keeps them until done, logs their failures."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def run_task(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run ``coro`` in the background on the running loop; ``name`` says what failed in the log."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error("background task %r failed", task.get_name(), exc_info=error)
