"""The follower is woken when an agent replaces an unfinished run's ``state.json`` (Linux: inotify).

The follower reads every run's files in rounds: every 5 ms while lines flow,
20 ms in a flood, 100 ms while a run is silent, 250 ms when none is active.
A status change (a run that ends, crashes, pauses for the battery) waited
for the next round: on average half of that, up to 100 ms for a silent
run. With this watch the agent's atomic rename of ``state.json`` wakes the
follower at once, and the change reaches the editor within a round's work.

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


class StateWatch:
    """Calls ``on_change`` when the ``state.json`` of a watched run folder is replaced or rewritten."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self._on_change = on_change
        self._events: platform.FolderEvents | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._unwatchable: set[str] = set()

    @property
    def active(self) -> bool:
        """Whether changes are watched at all (False: the follower's rounds alone see them)."""
        return self._events is not None

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
        if events is not None and STATE_NAME in events.names():
            self._on_change()
