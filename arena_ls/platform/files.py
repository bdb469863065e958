"""Files others may hold open: replacing, reading and deleting them, locks, held folders.

POSIX: plain ``os`` calls. Windows: a reader, antivirus or the search
indexer holding a file makes a replace or a delete fail with a sharing
violation, retried briefly here; readers open with delete sharing (see
docs/windows.md).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from arena_ls.platform.winapi import GENERIC_READ, Win32, is_sharing_violation, win32

_T = TypeVar("_T")


REPLACE_RETRY_SECONDS = 2.0
"""How long a replace or a read keeps retrying a sharing violation before giving up."""


if sys.platform == "win32":
    NO_FOLLOW_FLAG = 0
    """Windows' ``os.open`` has no ``O_NOFOLLOW``: a link there needs the privilege to make one."""
else:
    NO_FOLLOW_FLAG = os.O_NOFOLLOW
    """``os.open`` fails on a final symbolic link instead of writing through it."""


def replace_file(source: str | Path, target: str | Path) -> None:
    """Rename ``source`` over ``target`` atomically, through other processes' open handles.

    POSIX: ``os.replace``. Windows: the rename with POSIX semantics
    (``FileRenameInfoEx``), else ``os.replace`` (``MoveFileExW``); a sharing
    violation (a reader, antivirus, the search indexer holding either file)
    is retried with backoff for up to ``REPLACE_RETRY_SECONDS``.
    """
    retry_sharing(lambda: _replace_once(str(source), str(target)))


def _replace_once(source: str, target: str) -> None:
    if sys.platform == "win32" and win32().rename_posix(source, target):
        return
    os.replace(source, target)


REMOVE_RETRY_SECONDS = 0.2
"""How long a delete waits for a reader (antivirus, an editor) to let go; then the caller retries later."""


def remove_file(path: str | Path) -> bool:
    """Delete a file; False when another process holds it open (Windows) and it is still there.

    POSIX: ``os.remove`` (a reader keeps reading what it opened). Windows: a
    file open without delete sharing cannot be deleted; the sharing
    violation is retried briefly, then the caller is told to try again later
    (nothing waits long for a reader it does not control). A file that is
    already gone counts as deleted.
    """
    try:
        if sys.platform == "win32":
            retry_sharing(lambda: os.remove(path), REMOVE_RETRY_SECONDS)
        else:
            os.remove(path)
    except FileNotFoundError:
        return True
    except OSError as error:
        if is_sharing_violation(error):
            return False
        raise
    return True


def cache_home(environ: Mapping[str, str] | None = None) -> Path:
    """The user's folder for caches: ``%LOCALAPPDATA%`` (Windows), ``~/Library/Caches`` (macOS),
    ``$XDG_CACHE_HOME`` else ``~/.cache`` (elsewhere). A relative setting is ignored, as the XDG
    specification says."""
    environ = os.environ if environ is None else environ
    if sys.platform == "win32":
        configured = environ.get("LOCALAPPDATA")
        fallback = Path.home() / "AppData" / "Local"
    elif sys.platform == "darwin":
        configured, fallback = None, Path.home() / "Library" / "Caches"
    else:
        configured = environ.get("XDG_CACHE_HOME")
        fallback = Path.home() / ".cache"
    if configured and os.path.isabs(configured):
        return Path(configured)
    return fallback


def read_bytes_shared(path: Path) -> bytes:
    """A file's bytes, opened so that a writer can replace it meanwhile; sharing violations retried.

    Windows: ``open()`` does not share delete access, so a reader would make
    the writer's replace fail; ``CreateFileW`` with FILE_SHARE_DELETE does not.
    """
    return retry_sharing(lambda: _read_once(path))


def _read_once(path: Path) -> bytes:
    if sys.platform == "win32":
        return _windows_read(win32(), path)
    with open(path, "rb") as handle:
        return handle.read()


def _windows_read(api: Win32, path: Path) -> bytes:
    handle = api.open_file(str(path), GENERIC_READ)
    try:
        fd = api.open_osfhandle(handle, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError:
        api.close(handle)
        raise
    with os.fdopen(fd, "rb") as stream:  # owns the handle from here
        return stream.read()


def retry_sharing(action: Callable[[], _T], seconds: float | None = None) -> _T:
    """Run ``action``, retrying a sharing violation with backoff (2 ms, doubling, at most 100 ms).

    For ``seconds`` (default ``REPLACE_RETRY_SECONDS``); then the violation is raised.
    """
    deadline = time.monotonic() + (REPLACE_RETRY_SECONDS if seconds is None else seconds)
    delay = 0.002
    while True:
        try:
            return action()
        except OSError as error:
            if not is_sharing_violation(error) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def file_signature(path: Path) -> tuple[int, int, int, int] | None:
    """What changes whenever a file is replaced: (mtime_ns, size, inode or file index, ctime_ns).

    The modification time alone misses replacements on FAT32/exFAT (2 s
    resolution) and within one clock tick elsewhere; a replace always gives a
    new inode (POSIX) or file index (NTFS), and changes the ctime.
    """
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_ctime_ns)


FolderHandle = int
"""What ``open_folder`` holds on a folder: a file descriptor (POSIX), or -1 where none is kept."""


def open_folder(path: Path) -> FolderHandle:
    """Hold the folder open, so that where it went can be asked later (``folder_now``).

    Windows keeps no handle: a folder whose files are open there cannot be moved
    or deleted, so its path staying put is all that needs checking.
    """
    if sys.platform == "win32":
        return -1
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return -1


def folder_now(handle: FolderHandle, path: Path) -> Path | None:
    """Where the folder held by ``handle`` (opened at ``path``) is now; None when it was deleted.

    Linux reads the path of the open folder (``/proc/self/fd``): a folder moved
    or renamed is found at its new place. Elsewhere, or with no handle, the
    folder is where it was, or gone. A folder at ``path`` that is not the one
    held (the run folder renamed and another made in its place, issue 39) is
    not where the held one is: its place is asked as for a moved one.
    """
    if path.is_dir() and (sys.platform == "win32" or handle < 0 or _holds(handle, path)):
        return path
    if sys.platform == "win32" or handle < 0:
        return None
    try:
        if os.fstat(handle).st_nlink == 0:
            return None
        target = os.readlink(f"/proc/self/fd/{handle}")
    except OSError:
        return None
    moved = Path(target)
    return moved if moved.is_dir() else None


def _holds(handle: FolderHandle, path: Path) -> bool:
    """Whether ``path`` is the folder held open by ``handle`` (same device and inode)."""
    try:
        held, there = os.fstat(handle), os.stat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)


def try_lock_file(fd: int) -> bool:
    """Take an exclusive, non-blocking OS lock on an open file; False when another holds it.

    The kernel releases it when the holder closes the file or dies, so a
    crashed holder never leaves it taken. POSIX: ``flock``; Windows: a
    one-byte ``msvcrt.locking`` region.
    """
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    else:
        import fcntl

        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            return False
        return True


def unlock_file(fd: int) -> None:
    """Release a lock taken by ``try_lock_file``."""
    if sys.platform == "win32":
        import msvcrt

        with contextlib.suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)


# -- the blocks a file holds (issue 39 item 7: the final state on a disk full since the start) --


def allocated_bytes(stat: os.stat_result) -> int | None:
    """Bytes the file system has allocated to a file (whole blocks, at least its size on disk);
    None where the system does not say (Windows: ``st_blocks`` is POSIX only)."""
    if sys.platform == "win32":
        return None
    return int(stat.st_blocks) * 512
