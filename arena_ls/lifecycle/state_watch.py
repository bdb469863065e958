"""The follower is woken when an agent replaces an unfinished run's ``state.json``, or appends
to its output (Linux: inotify).

The follower reads every run's files in rounds: 20 ms in a flood, 100 ms
while a run is silent, 250 ms when none is active, and, where nothing wakes
it, every 5 ms while lines flow. A status change (a run that ends, crashes,
pauses for the battery) waited for the next round: on average half of that,
up to 100 ms for a silent run. With this watch the agent's atomic rename of
``state.json`` wakes the follower at once, and the change reaches the editor
within a round's work.

The agent's append of an index record (``output.idx``, or a segment's
``output.t<k>.idx`` / ``output.mid.idx``: written after the chunk it
describes) wakes it too. Where every unfinished run is watched
(``sees_every_run``), the follower no longer reads every 5 ms while lines
flow, nor every 100 ms while a run is silent: it reads when lines were
written or a state replaced (a round at most every 5 ms, 20 ms in a flood),
and every 500 ms regardless (``WATCHED_POLL``). A trainer printing ten lines
a second cost its server 0.2 s of CPU a second in 200 rounds that mostly
found nothing; its lines now reach the editor as soon, or sooner.

Only the folders of unfinished runs are watched. Where inotify is missing
or its limits are reached (``platform.open_folder_events`` gives None, or a
watch fails) the rounds go on as before: the watch only ever makes a change
seen sooner, never later. macOS and Windows poll.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from arena_ls import platform

log = logging.getLogger(__name__)

STATE_NAME = "state.json"
WHOLE = platform.WRITTEN
"""A state is read once it is whole in its place: renamed there, or closed after writing (an
append's ``IN_MODIFY`` of ``state.json`` itself is a write under way)."""


def is_output_index(name: str) -> bool:
    """Whether ``name`` is a run's output index or one of its segments' (``run.logsegments``)."""
    return name.startswith("output.") and name.endswith(".idx")


class StateWatch:
    """Calls ``on_change`` when the ``state.json`` of a watched run folder is replaced or rewritten,
    and ``on_lines`` when one of its output indexes is appended to."""

    def __init__(self, on_change: Callable[[], None], on_lines: Callable[[], None] | None = None) -> None:
        self._on_change = on_change
        self._on_lines = on_lines
        self._events: platform.FolderEvents | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unwatchable: set[str] = set()

    @property
    def active(self) -> bool:
        """Whether changes are watched at all (False: the follower's rounds alone see them)."""
        return self._events is not None

    @property
    def sees_every_run(self) -> bool:
        """Whether every folder ``follow`` was last given is watched: no write there goes untold."""
        return self._events is not None and not self._unwatchable

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Open the watch and read its events on ``loop`` (once; nothing where it cannot be opened)."""
        if self._events is not None:
            return
        events = platform.open_folder_events()
        if events is None:
            return
        try:
            loop.add_reader(events.fileno(), self._read)
        except (NotImplementedError, OSError, ValueError):  # a loop that cannot watch a descriptor
            events.close()
            return
        self._events, self._loop = events, loop

    def follow(self, folders: Iterable[Path]) -> None:
        """Watch exactly these run folders (those of the unfinished runs)."""
        events = self._events
        if events is None:
            return
        wanted = {str(folder): folder for folder in folders}
        for name in events.watched() - wanted.keys():
            events.unwatch(Path(name))
        self._unwatchable &= wanted.keys()
        for name in wanted.keys() - events.watched() - self._unwatchable:
            if not events.watch(wanted[name]):  # tried once: its state is seen at the rounds
                self._unwatchable.add(name)
                log.debug("cannot watch %s: its state changes are seen at the next round", name)

    def close(self) -> None:
        events, loop = self._events, self._loop
        self._events = self._loop = None
        if events is None:
            return
        if loop is not None and not loop.is_closed():
            loop.remove_reader(events.fileno())
        events.close()

    def _read(self) -> None:
        events = self._events
        if events is None:
            return
        changes = events.changes()
        if any(name == STATE_NAME and mask & WHOLE for name, mask in changes):
            self._on_change()
        if self._on_lines is not None and any(is_output_index(name) for name, _ in changes):
            self._on_lines()
