"""Watching run folders for replaced and appended files (Linux: inotify); elsewhere the caller polls."""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
import sys
from pathlib import Path
from typing import Any

IN_MODIFY = 0x00000002
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
WRITTEN = IN_MOVED_TO | IN_CLOSE_WRITE
"""A file whole in its place: renamed into the folder, or closed after writing."""
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_INOTIFY_EVENT = "iIII"  # wd, mask, cookie, len; then len bytes of NUL-padded name


class FolderEvents:
    """Linux: names written (closed after writing), renamed into or appended to in watched folders,
    via inotify.

    ``fileno`` is readable when there are events (for the event loop's
    ``add_reader``); ``changes`` drains them, each a name and its inotify mask (``names``: the
    names alone). An append (``IN_MODIFY``) is told at every write, before the file is closed:
    a reader of a file replaced whole waits for ``WRITTEN``. Where inotify is missing or its
    limits are reached, ``open_folder_events`` returns None and the caller polls as before.
    """

    def __init__(self, fd: int, libc: Any) -> None:
        self._fd = fd
        self._libc = libc
        self._watches: dict[str, int] = {}

    def fileno(self) -> int:
        return self._fd

    def watch(self, folder: Path) -> bool:
        """Watch ``folder`` (again: nothing new); False where it cannot be (gone, limits)."""
        key = str(folder)
        if key in self._watches:
            return True
        wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(key), WRITTEN | IN_MODIFY))
        if wd < 0:
            return False
        self._watches[key] = wd
        return True

    def unwatch(self, folder: Path) -> None:
        wd = self._watches.pop(str(folder), None)
        if wd is not None and wd not in self._watches.values():
            self._libc.inotify_rm_watch(self._fd, wd)  # fails harmlessly for a folder already gone

    def watched(self) -> set[str]:
        return set(self._watches)

    def names(self) -> list[str]:
        """The names of the events that came since the last call (never blocks)."""
        return [name for name, _ in self.changes()]

    def changes(self) -> list[tuple[str, int]]:
        """The events that came since the last call, each a name and its mask (never blocks)."""
        changes: list[tuple[str, int]] = []
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except OSError:  # BlockingIOError: drained
                return changes
            if not data:
                return changes
            changes.extend(_inotify_events(data))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._watches.clear()


def _inotify_names(data: bytes) -> list[str]:
    return [name for name, _ in _inotify_events(data)]


def _inotify_events(data: bytes) -> list[tuple[str, int]]:
    header = struct.calcsize(_INOTIFY_EVENT)
    events: list[tuple[str, int]] = []
    offset = 0
    while offset + header <= len(data):
        _, mask, _, size = struct.unpack_from(_INOTIFY_EVENT, data, offset)
        raw = data[offset + header : offset + header + size]
        events.append((os.fsdecode(raw.split(b"\0", 1)[0]), mask))
        offset += header + size
    return events


def open_folder_events() -> FolderEvents | None:
    """Linux: a ``FolderEvents``; None elsewhere (macOS, Windows: the caller polls) or on failure."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        fd = int(libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    return FolderEvents(fd, libc)
