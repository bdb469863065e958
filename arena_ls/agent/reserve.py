"""The space of a run's final state, reserved when the run starts (contract 7.1).

A run's outcome must never be lost to a full disk. The agent writes
``state.json`` by a temporary file renamed over it (``atomicfile``), which
needs new blocks: on a full disk, exactly when the trainer has just ended,
that write fails. So when the run starts the agent fills ``state.reserve``
in the run folder with ``RESERVE_BYTES`` zero bytes, synced (real blocks, not
a sparse hole). A final state that cannot be written the usual way is written
*into* that file in place (no new block needed), the file is shrunk to the
state's length (shrinking needs no space), synced, and renamed over
``state.json`` (a rename onto an existing name needs no new block either).
Readers still see the old file or the new one, never half.

Where there is no reserve (the disk was full before the run started: issue 39
item 7), the final state is written into ``state.json``'s own blocks, in place
(``write_in_place``), when it fits them: a reader may then see the file half
written for an instant, which it reads as damaged and reads again once the
file's signature changes; a ``running`` state left on disk would say less.

Standard library and ``platform`` only, like ``atomicfile``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from arena_ls import platform

RESERVE_NAME = "state.reserve"
RESERVE_BYTES = 64 * 1024
"""Room for the final state: a state is ~1-2 KB; its failure evidence is cut to fit."""


class StateReserve:
    """The pre-allocated file the final state is written into when the disk is full."""

    def __init__(self, run_folder: Path, size: int = RESERVE_BYTES) -> None:
        self.path = run_folder / RESERVE_NAME
        self.size = size

    @property
    def ready(self) -> bool:
        """Whether the reserve is there, whole, to be written into."""
        try:
            return self.path.stat().st_size >= self.size
        except OSError:
            return False

    def make(self) -> None:
        """Allocate the reserve (zeros written and synced); raises ``OSError`` when there is no room."""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_BINARY", 0), 0o644)
        try:
            block = bytes(min(self.size, 1 << 16))
            left = self.size
            while left > 0:
                left -= os.write(fd, block[:left])
            os.fsync(fd)
        except OSError:
            os.close(fd)
            self.discard()
            raise
        os.close(fd)

    def write_over(self, target: Path, data: bytes) -> None:
        """Write ``data`` into the reserve in place and rename it over ``target``.

        Raises ``OSError`` when the reserve is missing, too small, or the
        write fails; the reserve is then left as it was for another try.
        """
        if len(data) > self.size:
            raise OSError(f"the final state ({len(data)} bytes) does not fit the reserve ({self.size})")
        fd = os.open(self.path, os.O_RDWR | getattr(os, "O_BINARY", 0))
        try:
            if os.fstat(fd).st_size < len(data):
                raise OSError(f"{self.path} is shorter than the final state")
            os.lseek(fd, 0, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        platform.replace_file(self.path, target)

    def discard(self) -> None:
        """Remove the reserve (the final state was written the usual way)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path)


def write_in_place(target: Path, data: bytes) -> None:
    """Write ``data`` over ``target`` within the blocks it holds already (no new block needed).

    Raises ``OSError`` where the system does not say which blocks a file holds (Windows), or
    ``data`` would need more than ``target`` holds; ``target`` is then left as it was.
    """
    fd = os.open(target, os.O_RDWR | getattr(os, "O_BINARY", 0))
    try:
        allocated = platform.allocated_bytes(os.fstat(fd))
        if allocated is None or len(data) > allocated:
            raise OSError(f"{target} holds {allocated} bytes on disk, the final state needs {len(data)}")
        os.lseek(fd, 0, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.utime(target)  # a new signature: a reader that saw it half written reads it again
