"""Every difference between POSIX and Windows, in one place.

Process groups and sessions, detaching the job agent from the server,
job objects, the cooperative stop signal, killing a whole process tree,
pipes, and replacing or reading a file that another process may hold open.
Both branches are written and both are type-checked (``mypy --platform
win32`` and ``linux``): every platform test is a ``sys.platform`` check
that mypy understands. The Windows branch calls Win32 through ``Win32``, a
thin checked wrapper that the tests replace with a recording fake; see
docs/windows.md for each difference, what is done about it and how it is
tested.

psutil is imported inside the functions that need it: the job agent starts
its trainer through this module before it loads anything heavy.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import logging
import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import psutil

log = logging.getLogger(__name__)

_T = TypeVar("_T")

# Windows creation flags (defined here so the POSIX branch and the tests can name them too).
CREATE_SUSPENDED = 0x00000004
DETACHED_PROCESS = 0x00000008
CREATE_NEW_PROCESS_GROUP = 0x00000200
CREATE_BREAKAWAY_FROM_JOB = 0x01000000
CREATE_NO_WINDOW = 0x08000000

# Job objects.
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS = 9
DUPLICATE_SAME_ACCESS = 0x00000002
KILLED_BY_JOB_EXIT_CODE = 1
"""The exit code ``TerminateJobObject`` gives every process of an attempt's job."""

# Files.
GENERIC_READ = 0x80000000
DELETE = 0x00010000
SYNCHRONIZE = 0x00100000
FILE_SHARE_ALL = 0x1 | 0x2 | 0x4
"""FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE: a reader that never blocks a replace."""
OPEN_EXISTING = 3
FILE_ATTRIBUTE_NORMAL = 0x80
INVALID_HANDLE_VALUE = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
FILE_RENAME_INFO_EX_CLASS = 22
"""FileRenameInfoEx in FILE_INFO_BY_HANDLE_CLASS."""
FILE_RENAME_FLAG_REPLACE_IF_EXISTS = 0x1
FILE_RENAME_FLAG_POSIX_SEMANTICS = 0x2

# Win32 error codes.
ERROR_FILE_NOT_FOUND = 2
ERROR_PATH_NOT_FOUND = 3
ERROR_ACCESS_DENIED = 5
ERROR_INVALID_FUNCTION = 1
ERROR_NOT_SUPPORTED = 50
ERROR_INVALID_PARAMETER = 87
ERROR_SHARING_VIOLATION = 32
ERROR_LOCK_VIOLATION = 33
SHARING_ERRORS = frozenset({ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION, ERROR_LOCK_VIOLATION})
"""What Windows answers when another process (a reader, antivirus, the indexer) holds the file."""
_ERRNO_OF_WINERROR = {
    ERROR_FILE_NOT_FOUND: errno.ENOENT,
    ERROR_PATH_NOT_FOUND: errno.ENOENT,
    ERROR_ACCESS_DENIED: errno.EACCES,
    ERROR_SHARING_VIOLATION: errno.EACCES,
    ERROR_LOCK_VIOLATION: errno.EACCES,
}

REPLACE_RETRY_SECONDS = 2.0
"""How long a replace or a read keeps retrying a sharing violation before giving up."""

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
F_SETPIPE_SZ = 1031
F_GETPIPE_SZ = 1032
TRAINER_PIPE_BYTES = 1 << 20

if sys.platform == "win32":
    NO_FOLLOW_FLAG = 0
    """Windows' ``os.open`` has no ``O_NOFOLLOW``: a link there needs the privilege to make one."""
else:
    NO_FOLLOW_FLAG = os.O_NOFOLLOW
    """``os.open`` fails on a final symbolic link instead of writing through it."""
"""1 MiB: Linux's default ceiling for an unprivileged pipe (``/proc/sys/fs/pipe-max-size``);
on Windows the buffer size asked of ``CreatePipe``."""


# --------------------------------------------------------------------------- Win32 structures


class JobBasicLimits(ctypes.Structure):
    """JOBOBJECT_BASIC_LIMIT_INFORMATION (64 bytes on x64)."""

    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class IoCounters(ctypes.Structure):
    """IO_COUNTERS (48 bytes)."""

    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "ReadOperationCount",
            "WriteOperationCount",
            "OtherOperationCount",
            "ReadTransferCount",
            "WriteTransferCount",
            "OtherTransferCount",
        )
    ]


class JobExtendedLimits(ctypes.Structure):
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION (144 bytes on x64)."""

    _fields_ = [
        ("BasicLimitInformation", JobBasicLimits),
        ("IoInfo", IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


class FileRenameInfo(ctypes.Structure):
    """FILE_RENAME_INFO with its ``Flags`` member (FileRenameInfoEx); the name follows in the buffer."""

    _fields_ = [
        ("Flags", ctypes.c_uint32),
        ("RootDirectory", ctypes.c_void_p),
        ("FileNameLength", ctypes.c_uint32),
        ("FileName", ctypes.c_uint16 * 1),
    ]


def rename_info_buffer(target: str) -> ctypes.Array[ctypes.c_char]:
    """A FILE_RENAME_INFO asking to replace ``target`` with POSIX semantics (name NUL-terminated)."""
    name = target.encode("utf-16-le")
    offset = FileRenameInfo.FileName.offset
    buffer = ctypes.create_string_buffer(max(ctypes.sizeof(FileRenameInfo), offset + len(name) + 2))
    info = FileRenameInfo.from_buffer(buffer)
    info.Flags = FILE_RENAME_FLAG_REPLACE_IF_EXISTS | FILE_RENAME_FLAG_POSIX_SEMANTICS
    info.FileNameLength = len(name)
    ctypes.memmove(ctypes.addressof(buffer) + offset, name, len(name))
    return buffer


def win_error(code: int, what: str, filename: str | None = None) -> OSError:
    """An OSError for a failed Win32 call, of the subclass CPython would pick (PermissionError...)."""
    error = OSError(_ERRNO_OF_WINERROR.get(code, 0), f"{what} failed (Windows error {code})", filename)
    setattr(error, "winerror", code)  # noqa: B010  (typeshed declares it on Windows only)
    return error


def is_sharing_violation(error: OSError) -> bool:
    """True for Windows' answer to a file another process holds open (WinError 5, 32 or 33)."""
    return getattr(error, "winerror", None) in SHARING_ERRORS


class Win32:
    """The Win32 calls arena-ls makes, each result checked (a failure raises ``win_error``).

    ``kernel32`` and ``ntdll`` are ctypes libraries loaded with
    ``use_last_error=True`` (``win32()``); the tests pass recording fakes.
    """

    def __init__(
        self,
        kernel32: Any,
        ntdll: Any,
        last_error: Callable[[], int],
        open_osfhandle: Callable[[int, int], int],
    ) -> None:
        self.kernel32 = kernel32
        self.ntdll = ntdll
        self.last_error = last_error
        self.open_osfhandle = open_osfhandle

    def _check(self, ok: object, what: str) -> None:
        if not ok:
            raise win_error(self.last_error(), what)

    def create_kill_on_close_job(self) -> int:
        """A job object whose processes all die when its last handle closes."""
        job = self.kernel32.CreateJobObjectW(None, None)
        self._check(job, "CreateJobObjectW")
        limits = JobExtendedLimits()
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        try:
            self._check(
                self.kernel32.SetInformationJobObject(
                    job,
                    JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
                    ctypes.byref(limits),
                    ctypes.sizeof(limits),
                ),
                "SetInformationJobObject",
            )
        except OSError:
            self.kernel32.CloseHandle(job)
            raise
        return int(job)

    def assign(self, job: int, process: int) -> None:
        self._check(self.kernel32.AssignProcessToJobObject(job, process), "AssignProcessToJobObject")

    def give_handle(self, handle: int, process: int) -> None:
        """Copy ``handle`` into ``process``'s handle table; it stays open there until that process ends."""
        target = ctypes.c_void_p()
        current = self.kernel32.GetCurrentProcess()
        self._check(
            self.kernel32.DuplicateHandle(
                current, handle, process, ctypes.byref(target), 0, False, DUPLICATE_SAME_ACCESS
            ),
            "DuplicateHandle",
        )

    def resume(self, process: int) -> None:
        """Resume a process created suspended (psutil's ``resume`` makes the same call)."""
        status = self.ntdll.NtResumeProcess(process)
        if status != 0:
            raise OSError(0, f"NtResumeProcess failed (NTSTATUS {status & 0xFFFFFFFF:#010x})")

    def terminate_job(self, job: int, exit_code: int = KILLED_BY_JOB_EXIT_CODE) -> None:
        self._check(self.kernel32.TerminateJobObject(job, exit_code), "TerminateJobObject")

    def close(self, handle: int) -> None:
        self._check(self.kernel32.CloseHandle(handle), "CloseHandle")

    def open_file(self, path: str, access: int) -> int:
        """A handle on an existing file, shared for reading, writing and deleting."""
        handle = self.kernel32.CreateFileW(
            path, access, FILE_SHARE_ALL, None, OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, None
        )
        if handle is None or handle == INVALID_HANDLE_VALUE or handle == -1:
            raise win_error(self.last_error(), "CreateFileW", path)
        return int(handle)

    def rename_posix(self, source: str, target: str) -> bool:
        """Replace ``target`` by ``source`` with POSIX semantics; False where the file system cannot.

        With POSIX semantics a target that others hold open (with delete
        sharing) is replaced at once; they keep reading the old file.
        """
        handle = self.open_file(source, DELETE | SYNCHRONIZE)
        try:
            info = rename_info_buffer(target)
            if self.kernel32.SetFileInformationByHandle(
                handle, FILE_RENAME_INFO_EX_CLASS, info, ctypes.sizeof(info)
            ):
                return True
            code = self.last_error()
            if code in (ERROR_INVALID_PARAMETER, ERROR_NOT_SUPPORTED, ERROR_INVALID_FUNCTION):
                return False  # FAT32/exFAT, network shares, Windows before 10 1709
            raise win_error(code, "SetFileInformationByHandle", target)
        finally:
            self.kernel32.CloseHandle(handle)


_win32: Win32 | None = None


def win32() -> Win32:
    """The Win32 calls, loaded once (Windows only)."""
    global _win32
    if _win32 is None:
        _win32 = _load_win32()
    return _win32


def _load_win32() -> Win32:
    if sys.platform != "win32":
        raise OSError(errno.ENOSYS, "Win32 is only available on Windows")
    import msvcrt
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    ntdll = ctypes.WinDLL("ntdll")
    handle, dword, boolean = wintypes.HANDLE, wintypes.DWORD, wintypes.BOOL
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "CreateJobObjectW": (handle, [ctypes.c_void_p, wintypes.LPCWSTR]),
        "SetInformationJobObject": (boolean, [handle, ctypes.c_int, ctypes.c_void_p, dword]),
        "AssignProcessToJobObject": (boolean, [handle, handle]),
        "TerminateJobObject": (boolean, [handle, wintypes.UINT]),
        "CloseHandle": (boolean, [handle]),
        "GetCurrentProcess": (handle, []),
        "DuplicateHandle": (
            boolean,
            [handle, handle, handle, ctypes.POINTER(ctypes.c_void_p), dword, boolean, dword],
        ),
        "CreateFileW": (
            handle,
            [wintypes.LPCWSTR, dword, dword, ctypes.c_void_p, dword, dword, handle],
        ),
        "SetFileInformationByHandle": (boolean, [handle, ctypes.c_int, ctypes.c_void_p, dword]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(kernel32, name)
        function.restype, function.argtypes = restype, argtypes
    ntdll.NtResumeProcess.restype, ntdll.NtResumeProcess.argtypes = ctypes.c_long, [handle]
    return Win32(kernel32, ntdll, ctypes.get_last_error, msvcrt.open_osfhandle)


# --------------------------------------------------------------------------- files


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


# --------------------------------------------------------------------------- processes


def windows_device() -> bool:
    """True where the device profile is Windows (the seed's rules: AR010 is an error there)."""
    if sys.platform == "win32":
        return True
    return False


def process_identity(pid: int) -> float | None:
    """The creation time of ``pid``, or None when no such process exists.

    A pid together with its creation time names one process for good: a pid
    the kernel has reused for another program has another creation time.
    """
    import psutil

    try:
        return float(psutil.Process(pid).create_time())
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError, ValueError):
        return None


def is_same_process(pid: int | None, create_time: float | None) -> bool:
    """True when ``pid`` is alive and is the process created at ``create_time``."""
    import psutil

    if not pid or create_time is None:
        return False
    actual = process_identity(pid)
    if actual is None:
        return False
    if abs(actual - create_time) >= 0.01:
        return False
    with contextlib.suppress(psutil.Error):
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    return True


def is_recorded_process(pid: int | None, create_time: float | None) -> bool:
    """True while ``pid`` is the process created at ``create_time``, an unreaped zombie included.

    A zombie's pid cannot be reused until it is reaped, so while this holds the
    process group ``pid`` led (POSIX) is still the trainer's, even after it died.
    """
    if not pid or create_time is None:
        return False
    actual = process_identity(pid)
    return actual is not None and abs(actual - create_time) < 0.01


def is_zombie(pid: int) -> bool:
    """True when ``pid`` has exited and waits to be reaped by its parent."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


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


# --------------------------------------------------------------------------- command-line limits (issue 39)

LINUX_ARG_STRLEN = 32 * 4096
"""Linux: one argument (or one environment entry) longer than this fails ``execve`` (``MAX_ARG_STRLEN``)."""
WINDOWS_COMMAND_LINE = 32_767
"""Windows: ``CreateProcess`` takes a command line of at most this many characters."""


def command_line_refusal(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why the OS would refuse to start ``argv`` with ``env`` (too long), or None.

    Checked before anything of a run exists: a 20 MB argument failed the
    exec inside the agent, and the run ended ``lost`` ten seconds later.
    Linux: each string at most ``MAX_ARG_STRLEN``, all of them (with their
    pointers) at most ``ARG_MAX``. Windows: the command line as
    ``subprocess.list2cmdline`` writes it, at most 32,767 characters.
    """
    if sys.platform == "win32":
        length = len(subprocess.list2cmdline(list(argv)))
        if length > WINDOWS_COMMAND_LINE:
            return f"the command line is {length:,} characters, more than Windows' {WINDOWS_COMMAND_LINE:,}"
        return None
    longest = max((len(arg.encode("utf-8", "surrogateescape")) for arg in argv), default=0)
    if longest > LINUX_ARG_STRLEN:
        return f"one argument is {longest:,} bytes, more than the {LINUX_ARG_STRLEN:,} an exec takes"
    strings = [*argv, *(f"{key}={value}" for key, value in env.items())]
    total = sum(len(text.encode("utf-8", "surrogateescape")) + 1 + 8 for text in strings)
    limit = _arg_max()
    if total > limit:
        return f"the command line and environment take {total:,} bytes, more than the {limit:,} an exec takes"
    return None


def helper_process_flags() -> int:
    """``creationflags`` for a helper process of the server (the gates' worker): Windows, no
    console window; elsewhere none."""
    return CREATE_NO_WINDOW if sys.platform == "win32" else 0


def _arg_max() -> int:
    if sys.platform == "win32":
        return WINDOWS_COMMAND_LINE
    try:
        return int(os.sysconf("SC_ARG_MAX"))
    except (OSError, ValueError):
        return 128 * 1024


def interpreter_without_launcher(executable: str) -> tuple[str, dict[str, str]]:
    """The interpreter to start for ``executable``, and what its environment needs.

    Windows: a venv's ``Scripts\\python.exe`` is a launcher that starts the
    base interpreter as its child: an extra process, holding no GPU memory,
    whose pid would be recorded, and (detached) a visible console. The base
    interpreter named by ``pyvenv.cfg``'s ``home``, started with
    ``__PYVENV_LAUNCHER__`` set to the launcher's path, is that same venv's
    Python in one process (what the launcher itself does). POSIX: unchanged.
    """
    if sys.platform != "win32":
        return executable, {}
    return venv_base_interpreter(Path(executable))


def venv_base_interpreter(executable: Path) -> tuple[str, dict[str, str]]:
    """``<venv>\\Scripts\\python.exe`` -> (``<home>\\python.exe``, its launcher variable); else unchanged."""
    home = _pyvenv_home(executable.parent.parent / "pyvenv.cfg")
    base = Path(home) / executable.name if home else None
    if base is None or not base.is_file() or base == executable:
        return str(executable), {}
    return str(base), {"__PYVENV_LAUNCHER__": str(executable)}


def launcher_env(env: Mapping[str, str], extra: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a new interpreter: ``extra`` added, an inherited ``__PYVENV_LAUNCHER__`` dropped.

    A launcher variable left over from our own start would make another
    interpreter take our venv for its own.
    """
    return {**{k: v for k, v in env.items() if k.upper() != "__PYVENV_LAUNCHER__"}, **extra}


def _pyvenv_home(config: Path) -> str | None:
    try:
        text = config.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() == "home":
            return value.strip() or None
    return None


def spawn_detached(argv: Sequence[str], *, cwd: Path, log_file: Path) -> subprocess.Popen[bytes]:
    """Start the job agent so that it outlives the server and the editor.

    POSIX: a new session (no controlling terminal, its own process group),
    so a signal to the editor's or server's group or terminal never reaches
    it; it stays the server's child, which reaps it (no tool kills a POSIX
    tree by parent pid). Windows: through an intermediate process
    (``python -m arena_ls.platform detach``) that starts the agent and
    exits, so the agent has no live parent chain to the server and
    ``taskkill /T`` on the server does not reach it. The returned Popen is
    the agent (POSIX) or the intermediate (Windows, exit 0 once the agent runs).
    """
    with open(log_file, "ab") as agent_log:
        kwargs: dict[str, Any] = {
            "cwd": str(cwd),
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.DEVNULL,
            "stderr": agent_log,
            "close_fds": True,
        }
        if sys.platform == "win32":
            python, extra_env = interpreter_without_launcher(sys.executable)
            request = {"argv": list(argv), "cwd": str(cwd), "log": str(log_file)}
            kwargs["env"] = launcher_env(os.environ, extra_env)
            kwargs["creationflags"] = CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
            return subprocess.Popen(
                [python, "-m", "arena_ls.platform", "detach", json.dumps(request)], **kwargs
            )
        kwargs["start_new_session"] = True
        return subprocess.Popen(list(argv), **kwargs)


SPARE_AGENT = sys.platform != "win32"
"""Whether a job agent can be started ahead of need and handed its run later (``spawn_spare_agent``).

POSIX: yes, over the spare's stdin. Windows: no. There the agent is
started through the ``detach`` intermediate, inside a kill-on-close job
created for it; the pipe the order would travel on has to pass through
that intermediate, and the job would have to outlive it as well. That is
not done, so a Windows run starts its agent cold (``spawn_detached``).
"""


def spawn_spare_agent(argv: Sequence[str], *, cwd: Path) -> subprocess.Popen[bytes] | None:
    """Start a job agent that loads its code and then waits on its stdin for the run to take.

    Detached as ``spawn_detached`` detaches (POSIX: a new session; it stays
    the server's child, which reaps it). Its stdin is a pipe that only this
    server holds. When the server goes away, for any reason, the pipe
    reaches end-of-file and the spare exits. Windows: None (see ``SPARE_AGENT``).
    """
    if sys.platform == "win32" or not SPARE_AGENT:
        return None
    return subprocess.Popen(
        list(argv),
        cwd=str(cwd),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
        start_new_session=True,
    )


def take_run_stdio(agent_log: str) -> None:
    """In a spare agent handed its run: stdin from the null device, stderr to the run's ``agent.log``.

    A cold agent is started with these as its standard streams; a spare
    agent had its order pipe and the null device until now.
    """
    null = os.open(os.devnull, os.O_RDONLY)
    log_fd = os.open(agent_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.dup2(null, 0)
        os.dup2(log_fd, 2)
    finally:
        os.close(null)
        os.close(log_fd)


def spawn_failed(code: int) -> bool:
    """Has the process ``spawn_detached`` returned ended in a way that means no agent runs?

    POSIX: it is the agent, so any end before the agent recorded its trainer
    is a failed launch. Windows: it is the intermediate, whose exit 0 means
    the agent was started.
    """
    if sys.platform == "win32":
        return code != 0
    return True


def start_agent_in_job(
    api: Win32, argv: Sequence[str], *, cwd: str, log_file: str, popen: Callable[..., Any] = subprocess.Popen
) -> int:
    """Windows, in the intermediate: start the agent in a kill-on-close job of its own; its pid.

    The agent is created suspended, assigned to the job, given a handle on
    it (so the job lives exactly as long as the agent: when the agent dies,
    Windows closes the handle and kills every process still in the job,
    trainers included), then resumed. Every process it starts afterwards is
    born inside the job. No console window (CREATE_NO_WINDOW), its own
    process group, out of the editor's job where the job allows breakaway.
    """
    python, extra_env = interpreter_without_launcher(argv[0])
    command = [python, *argv[1:]]
    job = api.create_kill_on_close_job()
    try:
        with open(log_file, "ab") as agent_log:
            process = popen_breaking_away(
                popen,
                command,
                CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW,
                cwd=cwd,
                env=launcher_env(os.environ, extra_env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=agent_log,
                close_fds=True,
            )
        handle = _process_handle(process)
        try:
            api.assign(job, handle)
            api.give_handle(job, handle)
            api.resume(handle)
        except OSError:
            process.kill()  # still suspended: it never ran
            raise
        return int(process.pid)
    finally:
        api.close(job)


def popen_breaking_away(popen: Callable[..., Any], argv: list[str], flags: int, **kwargs: Any) -> Any:
    """Create a process out of the current job; inside it when the job refuses breakaway.

    ``CREATE_BREAKAWAY_FROM_JOB`` fails with access denied in a job without
    JOB_OBJECT_LIMIT_BREAKAWAY_OK; the process then stays in that job (and
    dies with it), which is logged.
    """
    try:
        return popen(argv, creationflags=flags | CREATE_BREAKAWAY_FROM_JOB, **kwargs)
    except OSError as error:
        if getattr(error, "winerror", None) != ERROR_ACCESS_DENIED:
            raise
        log.warning("this process's job refuses breakaway: the agent stays in it and dies with it")
        return popen(argv, creationflags=flags, **kwargs)


def detach_main(args: Sequence[str]) -> int:
    """``python -m arena_ls.platform detach REQUEST``: the intermediate process (Windows)."""
    if len(args) != 2 or args[0] != "detach":
        print("usage: python -m arena_ls.platform detach REQUEST_JSON", file=sys.stderr)
        return 2
    try:
        request = json.loads(args[1])
        pid = start_agent_in_job(
            win32(), [str(a) for a in request["argv"]], cwd=str(request["cwd"]), log_file=str(request["log"])
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"arena-ls: could not start the job agent: {error}", file=sys.stderr)
        return 1
    print(f"arena-ls: started the job agent, pid {pid}", file=sys.stderr)
    return 0


def _die_with_parent() -> None:
    """In the trainer, before exec: receive SIGKILL when the agent dies (Linux)."""
    if sys.platform == "win32":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


_attempt_jobs: dict[int, int] = {}
"""Windows: the job object of each trainer this agent started, by the trainer's pid."""


def spawn_trainer(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdout: int | IO[bytes],
    stderr: int | IO[bytes],
) -> subprocess.Popen[bytes]:
    """Start the trainer as the agent's child, in a process group of its own.

    Its own group lets the agent signal or kill every process of the trainer
    (data workers included) without touching itself. On Linux the trainer
    also dies with its agent, so a trainer is never left running unmanaged.
    On Windows it is created suspended, put in a kill-on-close job of its
    own (nested in the agent's), then resumed, so every process it ever
    starts is in that job; ``kill_tree`` and ``kill_group_remnants``
    terminate the job.
    """
    kwargs: dict[str, Any] = {
        "cwd": str(cwd),
        "env": env,
        "stdin": subprocess.DEVNULL,
        "stdout": stdout,
        "stderr": stderr,
        "close_fds": True,
    }
    if sys.platform == "win32":
        return spawn_trainer_in_job(win32(), list(argv), kwargs)
    kwargs["start_new_session"] = True
    if sys.platform.startswith("linux"):
        kwargs["preexec_fn"] = _die_with_parent
    return subprocess.Popen(list(argv), **kwargs)


def spawn_trainer_in_job(
    api: Win32, argv: list[str], kwargs: dict[str, Any], popen: Callable[..., Any] = subprocess.Popen
) -> subprocess.Popen[bytes]:
    """Windows: the trainer, created suspended, in a job of this attempt's, then resumed."""
    python, extra_env = interpreter_without_launcher(argv[0])
    kwargs = {**kwargs, "env": launcher_env(kwargs["env"], extra_env)}
    pipes = _large_pipes(api, kwargs)
    flags = CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
    try:
        process: subprocess.Popen[bytes] = popen([python, *argv[1:]], creationflags=flags, **kwargs)
    finally:
        for fd in pipes.child_ends:
            os.close(fd)
    pipes.attach(process)
    handle = _process_handle(process)
    try:
        job = api.create_kill_on_close_job()
    except OSError as error:
        log.warning("no job object for the trainer (%s): the agent's job still holds it", error)
    else:
        try:
            api.assign(job, handle)
        except OSError as error:
            log.warning("could not put the trainer in its job (%s): the agent's job still holds it", error)
            api.close(job)
        else:
            _attempt_jobs[int(process.pid)] = job
    try:
        api.resume(handle)
    except OSError:
        process.kill()
        end_attempt_job(api, int(process.pid))
        raise
    return process


def _process_handle(process: Any) -> int:
    """The Windows process handle a ``Popen`` keeps (``Popen._handle``, CPython's own attribute)."""
    return int(process._handle)


class _Pipes:
    """Windows: the trainer's output pipes, created with a large buffer."""

    def __init__(self) -> None:
        self.child_ends: list[int] = []
        self.ours: dict[str, int] = {}

    def attach(self, process: Any) -> None:
        for name, fd in self.ours.items():
            setattr(process, name, os.fdopen(fd, "rb", buffering=0))


def _large_pipes(api: Win32, kwargs: dict[str, Any]) -> _Pipes:
    """Replace ``subprocess.PIPE`` in ``kwargs`` with pipes of ``TRAINER_PIPE_BYTES``.

    ``subprocess`` asks ``CreatePipe`` for the default size (4 KiB), which a
    chatty trainer fills at every few lines; the size given is a suggestion
    Windows honours for anonymous pipes' buffering. Where the pipe cannot be
    made here, ``subprocess`` makes its own.
    """
    pipes = _Pipes()
    if sys.platform != "win32":
        return pipes
    import _winapi
    import msvcrt

    for name in ("stdout", "stderr"):
        if kwargs.get(name) != subprocess.PIPE:
            continue
        try:
            read_handle, write_handle = _winapi.CreatePipe(None, TRAINER_PIPE_BYTES)
        except OSError as error:
            log.warning("could not create a large pipe (%s): the default one is used", error)
            continue
        pipes.ours[name] = msvcrt.open_osfhandle(read_handle, os.O_RDONLY)
        kwargs[name] = msvcrt.open_osfhandle(write_handle, 0)
        pipes.child_ends.append(kwargs[name])
    return pipes


def end_attempt_job(api: Win32, pid: int) -> bool:
    """Windows: terminate and close the job of the trainer ``pid``; False when it had none."""
    job = _attempt_jobs.pop(pid, None)
    if job is None:
        return False
    try:
        api.terminate_job(job)
    except OSError as error:
        log.warning("could not terminate the trainer's job: %s", error)
    finally:
        with contextlib.suppress(OSError):
            api.close(job)
    return True


def terminate_attempt_job(api: Win32, pid: int) -> bool:
    """Windows: kill every process of the trainer ``pid``'s job, keeping the job; False without one."""
    job = _attempt_jobs.get(pid)
    if job is None:
        return False
    api.terminate_job(job)
    return True


def enlarge_pipe(fd: int, size: int = TRAINER_PIPE_BYTES) -> int | None:
    """Linux: grow a pipe's buffer; the new size, or None where that cannot be done.

    With the default 64 KiB a trainer that writes line by line fills the pipe
    within a fraction of a millisecond and then waits for the agent at every
    few lines; a larger pipe lets the agent read it in batches. (Windows:
    the pipes are created large, see ``_large_pipes``.)
    """
    if not sys.platform.startswith("linux"):
        return None
    import fcntl

    try:
        return int(fcntl.fcntl(fd, F_SETPIPE_SZ, size))
    except OSError:
        return None


def pipe_size(fd: int) -> int:
    """Linux: the capacity of a pipe in bytes; 0 where it cannot be known."""
    if not sys.platform.startswith("linux"):
        return 0
    import fcntl

    try:
        return int(fcntl.fcntl(fd, F_GETPIPE_SZ))
    except OSError:
        return 0


def become_subreaper() -> bool:
    """Linux: adopt the orphans of our descendants, so that we reap them ourselves.

    A killed tree's grandchildren are otherwise re-parented to init, and
    stay zombies until init reaps them (on some machines only every second or
    two). True when the agent is now a subreaper.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def reap_adopted(keep: int | None) -> list[int]:
    """Reap every exited child except ``keep`` (the trainer, which its Popen reaps)."""
    reaped: list[int] = []
    if not sys.platform.startswith("linux"):  # only Linux makes the agent a subreaper
        return reaped
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return reaped
        if info is None or info.si_pid == keep:
            return reaped
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, os.WNOHANG)
        reaped.append(info.si_pid)


def cooperative_signal_name() -> str | None:
    """The signal the stop protocol's signal stage sends; None on Windows, where it sends none.

    Windows has no signal for one process: a console control event
    (CTRL_BREAK_EVENT) reaches every process of the console's group, the
    trainer's DataLoader workers included, and Python turns it into SIGBREAK,
    which kills a trainer that only handles SIGTERM at once (exit
    0xC000013A), mid-checkpoint perhaps. There the stop file is the
    cooperative path, and the grace window ends with ``kill_tree``.
    """
    if sys.platform == "win32":
        return None
    return "SIGTERM"


def send_cooperative_signal(pid: int) -> bool:
    """Ask a trainer to stop with SIGTERM (POSIX); False, sending nothing, on Windows."""
    if sys.platform == "win32":
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return True


def _collect_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants, children first."""
    import psutil

    try:
        root = psutil.Process(pid)
        children = root.children(recursive=True)
    except psutil.Error:
        return []
    return [*reversed(children), root]


def _group_members(pgid: int) -> list[psutil.Process]:
    """Processes still in the trainer's process group (re-parented ones too)."""
    if sys.platform == "win32":
        return []
    import psutil

    members: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, PermissionError, OSError, psutil.Error):
            continue
    return members


def kill_tree(
    pid: int, *, pgid: int | None = None, timeout: float = 5.0, own_child: bool = False
) -> list[int]:
    """Kill a process and every descendant, children first; return survivors' pids.

    Descendants that were re-parented away from the tree (a double fork) are
    found through the process group the trainer leads (POSIX) or are in the
    trainer's job object, which is terminated first (Windows, in the agent
    that started it). ``pgid`` defaults to ``pid`` since the trainer is
    started as a group leader. With
    ``own_child`` the root is our child: it is killed but not waited for here,
    because waiting would reap it and steal its exit status from ``Popen``.
    """
    import psutil

    if sys.platform == "win32":
        with contextlib.suppress(OSError):
            terminate_attempt_job(win32(), pid)
    group = pid if pgid is None else pgid
    victims = {p.pid: p for p in _collect_tree(pid)}
    for member in _group_members(group):
        victims.setdefault(member.pid, member)
    ordered = sorted(victims.values(), key=lambda p: p.pid == pid)
    for proc in ordered:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    waited = [p for p in ordered if not (own_child and p.pid == pid)]
    _, alive = psutil.wait_procs(waited, timeout=timeout)
    return [p.pid for p in alive]


def kill_group_remnants(pgid: int, timeout: float = 5.0) -> list[int]:
    """After a trainer exited: kill what is left of its process group.

    The leader itself is never touched (its pid may already name another
    process). Windows has no process groups to search: there the trainer's
    job object (``pgid`` is its pid) is terminated and closed, which kills
    whatever of its tree is left. Returns the pids that survived.
    """
    if sys.platform == "win32":
        with contextlib.suppress(OSError):
            end_attempt_job(win32(), pgid)
        return []
    import psutil

    remnants = [p for p in _group_members(pgid) if p.pid != pgid]
    for proc in remnants:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs(remnants, timeout=timeout)
    return [p.pid for p in alive]


def tree_pids(pid: int) -> list[int]:
    """Pids of a live process and its descendants (empty when it is gone)."""
    return [p.pid for p in _collect_tree(pid)]


def console_script(name: str) -> str:
    """The file name pip gives a console script (``py-spy``): ``name.exe`` on Windows."""
    if sys.platform == "win32":
        return f"{name}.exe"
    return name


def describe_signal(returncode: int) -> tuple[int | None, str | None]:
    """Split a Popen return code into (exitCode, signal name)."""
    if sys.platform != "win32" and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"SIG{-returncode}"
        return None, name
    return returncode, None


VMSTAT = Path("/proc/vmstat")


def oom_kill_count(vmstat: Path = VMSTAT) -> int | None:
    """How many processes the kernel's OOM killer has ended since boot, or None where unknown.

    Linux counts them in ``/proc/vmstat``'s ``oom_kill`` (4.13 and later, memory cgroups'
    kills included); Windows has no OOM killer (an allocation fails instead). Read before
    and after a trainer runs, it tells a person's ``kill -9`` from running out of memory.
    """
    if sys.platform == "win32":
        return None
    try:
        text = vmstat.read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill":
            return int(value) if value.strip().isdigit() else None
    return None


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


def thread_cpu_and_waits() -> tuple[float, int]:
    """This thread's CPU time (seconds, user and system) and how often it has waited so far
    (voluntary context switches; Linux counts them per thread, Windows here does not: 0).

    The slow-callback check (``loopcheck``) needs the count: a thread waiting for the GIL
    wakes at every switch interval, and on Linux each wake is CPU time of its own."""
    if sys.platform == "linux":
        import resource

        usage = resource.getrusage(resource.RUSAGE_THREAD)
        return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw
    return time.thread_time(), 0


# --------------------------------------------------------------------------- searching output

CaseBlindSearch = Callable[[bytes, bytes], bool]
"""``(data, word) -> bool``: ``word`` (ASCII letters) is in ``data`` in any case; ``data`` has no NUL."""


@functools.cache
def case_blind_search() -> CaseBlindSearch | None:
    """libc's ``strcasestr`` (Linux, macOS), or None where there is none or it does not fold ASCII.

    The agent looks for the word "checkpoint" in any case in every byte a
    trainer prints (``checkpoint_lines.chunk_mentions_checkpoint``). In
    Python that is a lowered copy and a search, 0.6 ms a MiB, most of the
    agent's work in a flood; ``strcasestr`` takes 0.27 ms and needs no copy
    (and ctypes lets go of the GIL meanwhile). It folds case by the C
    locale's ``tolower``: a locale whose ``tolower('I')`` is not ``i``
    (Turkish ISO-8859-9) would miss ``CHECKPOINT``, so it is used only if
    every ASCII letter is found in its other case (``_folds_ascii``). It
    stops at a NUL byte: callers search data with a NUL the Python way.
    Windows: None (the C runtime has no such function).
    """
    if sys.platform == "win32":
        return None
    try:
        search = ctypes.CDLL(None).strcasestr
    except (OSError, AttributeError):
        return None
    search.restype = ctypes.c_void_p
    search.argtypes = (ctypes.c_char_p, ctypes.c_char_p)

    def found(data: bytes, word: bytes) -> bool:
        return search(data, word) is not None

    return found if _folds_ascii(found) else None


def _folds_ascii(found: CaseBlindSearch) -> bool:
    """Every ASCII letter is found in its other case (a false match would only cost a full parse)."""
    upper = bytes(range(ord("A"), ord("Z") + 1))
    lower = upper.lower()
    for big, small in zip(upper, lower, strict=True):
        if not (found(bytes([big]), bytes([small])) and found(bytes([small]), bytes([big]))):
            return False
    return True


# --------------------------------------------------------------------------- watching run folders

IN_CLOSE_WRITE = 0x00000008
IN_MOVED_TO = 0x00000080
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_INOTIFY_EVENT = "iIII"  # wd, mask, cookie, len; then len bytes of NUL-padded name


class FolderEvents:
    """Linux: names written (closed after writing) or renamed into watched folders, via inotify.

    ``fileno`` is readable when there are events (for the event loop's
    ``add_reader``); ``names`` drains them. Where inotify is missing or its
    limits are reached, ``open_folder_events`` returns None and the caller
    polls as before.
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
        wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(key), IN_MOVED_TO | IN_CLOSE_WRITE))
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
        names: list[str] = []
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except OSError:  # BlockingIOError: drained
                return names
            if not data:
                return names
            names.extend(_inotify_names(data))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._watches.clear()


def _inotify_names(data: bytes) -> list[str]:
    header = struct.calcsize(_INOTIFY_EVENT)
    names: list[str] = []
    offset = 0
    while offset + header <= len(data):
        _, _, _, size = struct.unpack_from(_INOTIFY_EVENT, data, offset)
        raw = data[offset + header : offset + header + size]
        names.append(os.fsdecode(raw.split(b"\0", 1)[0]))
        offset += header + size
    return names


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


# -- the laptop: the machine's boot, a pending restart, a start at logon (issue 37, contract 8.3) --

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
"""Linux: a random id the kernel draws at every boot (``sd_id128_get_boot(3)``), not namespaced."""


def boot_id(path: Path = BOOT_ID_PATH) -> str | None:
    """This boot's id where the system has one (Linux); None elsewhere or when unreadable.

    Windows and macOS have no such id: their restarts are told by the boot time alone."""
    if sys.platform == "win32":
        return None
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return text or None


def boot_time() -> float | None:
    """When the machine booted, epoch seconds (``psutil.boot_time``), or None when unreadable.

    It is computed from the system clock: a clock step or NTP moves it (psutil's
    docstring; Windows smooths it by about a second), so it is compared with a tolerance."""
    import psutil  # see the module docstring

    try:
        return float(psutil.boot_time())
    except (OSError, RuntimeError, psutil.Error):
        return None


WINDOWS_REBOOT_KEYS = (
    r"SOFTWARE\Microsoft\Windows\CurrentVersion\Component Based Servicing\RebootPending",
    r"SOFTWARE\Microsoft\Windows\CurrentVersion\WindowsUpdate\Auto Update\RebootRequired",
)
"""Keys of HKLM whose presence says Windows waits for a restart (servicing, Windows Update)."""
SESSION_MANAGER_KEY = r"SYSTEM\CurrentControlSet\Control\Session Manager"
PENDING_RENAMES_VALUE = "PendingFileRenameOperations"
"""A value (not a key) of the session manager: files an installer renames at the next boot."""
LINUX_REBOOT_MARKERS = (Path("/var/run/reboot-required"), Path("/run/reboot-needed"))
"""Debian and Ubuntu's marker (policy 9.12), openSUSE's (zypp-boot-plugin)."""


def reboot_pending(
    *,
    registry: Any = None,
    markers: Sequence[Path] = LINUX_REBOOT_MARKERS,
    windows: bool | None = None,
) -> str | None:
    """What says the machine waits for a restart (an update installed), or None.

    ``registry`` replaces the ``winreg`` module and ``windows`` the platform (the tests
    read a faked registry on Linux); ``markers`` are the files a POSIX system leaves."""
    if windows is None:
        windows = sys.platform == "win32"
    if windows:
        return _windows_reboot_pending(registry if registry is not None else _winreg())
    for marker in markers:
        if marker.exists():
            return f"{marker} exists" + _pending_packages(marker)
    return None


def _pending_packages(marker: Path) -> str:
    """The packages that asked for the restart (Debian's ``reboot-required.pkgs``), shortly."""
    try:
        names = marker.with_name(marker.name + ".pkgs").read_text(errors="replace").split()
    except OSError:
        return ""
    if not names:
        return ""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f" (asked by {', '.join(sorted(set(names))[:3])}{more})"


def _winreg() -> Any:
    if sys.platform == "win32":
        import winreg

        return winreg
    raise OSError(errno.ENOSYS, "the Windows registry exists only on Windows")


def _windows_reboot_pending(registry: Any) -> str | None:
    """The three places Windows records a pending restart (HKLM, read-only, 64-bit view)."""
    for key in WINDOWS_REBOOT_KEYS:
        if _registry_read(registry, key, None) is not None:
            return f"HKLM\\{key} exists"
    renames = _registry_read(registry, SESSION_MANAGER_KEY, PENDING_RENAMES_VALUE)
    if renames:
        return f"HKLM\\{SESSION_MANAGER_KEY} has {PENDING_RENAMES_VALUE}"
    return None


def _registry_read(registry: Any, key: str, value: str | None) -> Any:
    """The key's handle as True (``value`` None) or the value's data; None when either is absent."""
    access = registry.KEY_READ | getattr(registry, "KEY_WOW64_64KEY", 0)
    try:
        handle = registry.OpenKey(registry.HKEY_LOCAL_MACHINE, key, 0, access)
    except OSError:
        return None
    try:
        if value is None:
            return True
        data, _kind = registry.QueryValueEx(handle, value)
        return data
    except OSError:
        return None
    finally:
        registry.CloseKey(handle)


# A start at logon (``arena autostart``): Windows' Task Scheduler, a systemd user unit, an XDG
# autostart entry. The command is run by the argument list ``run`` (the tests fake it).

TimeoutExpired = subprocess.TimeoutExpired
Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]
AUTOSTART_TIMEOUT = 30.0
"""Seconds ``schtasks`` or ``systemctl --user`` may take before the command is given up."""


def run_quietly(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a system tool by its argument list (never a shell), its output captured."""
    return subprocess.run(
        argv, capture_output=True, text=True, errors="replace", timeout=AUTOSTART_TIMEOUT, check=False
    )


def autostart_kind(*, windows: bool | None = None, systemd_user: bool | None = None) -> str:
    """Where a start at logon is registered here: ``task-scheduler``, ``systemd`` or ``xdg``."""
    if windows is None:
        windows = sys.platform == "win32"
    if windows:
        return "task-scheduler"
    if systemd_user is None:
        systemd_user = _systemd_user_running()
    return "systemd" if systemd_user else "xdg"


def _systemd_user_running() -> bool:
    """A systemd user manager serves this user (its runtime folder has ``systemd/private``)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime or shutil_which("systemctl") is None:
        return False
    return (Path(runtime) / "systemd" / "private").exists()


def shutil_which(name: str) -> str | None:
    import shutil  # rarely needed: not at the agent's start

    return shutil.which(name)


def config_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME``, else ``~/.config`` (POSIX)."""
    environ = os.environ if environ is None else environ
    configured = environ.get("XDG_CONFIG_HOME")
    if configured and os.path.isabs(configured):
        return Path(configured)
    return Path.home() / ".config"


def systemd_quote(argv: Sequence[str]) -> str:
    """An ``ExecStart=`` line's words (systemd.service(5) "Command lines"): each word in double
    quotes, with ``\\`` and ``"`` escaped, ``%`` doubled (a specifier) and ``$`` doubled (a
    variable)."""
    words = []
    for word in argv:
        escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
        words.append(f'"{escaped}"')
    return " ".join(words)


def desktop_exec_quote(argv: Sequence[str]) -> str:
    """An XDG ``Exec=`` value (Desktop Entry Specification, "The Exec key"): each word quoted,
    with ``"``, `` ` ``, ``$`` and ``\\`` escaped by a backslash, ``%`` doubled, then the string
    escapes of a value (a backslash doubled again)."""
    words = []
    for word in argv:
        quoted = "".join("\\" + char if char in '"`$\\' else char for char in word).replace("%", "%%")
        words.append(f'"{quoted}"')
    return " ".join(words).replace("\\", "\\\\")


def systemd_unit(description: str, argv: Sequence[str], cwd: Path) -> str:
    """A user unit that runs ``argv`` once at logon. ``KillMode=process``: the run it resumes is
    owned by a detached job agent, which must outlive this one-shot command."""
    return (
        "[Unit]\n"
        f"Description={description}\n"
        "After=default.target\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"WorkingDirectory={_systemd_path(cwd)}\n"
        f"ExecStart={systemd_quote(argv)}\n"
        "KillMode=process\n\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def _systemd_path(path: Path) -> str:
    """A path setting's value: taken as written (no quotes), ``%`` doubled (a specifier)."""
    return str(path).replace("%", "%%")


def desktop_entry(description: str, argv: Sequence[str], cwd: Path) -> str:
    """An XDG autostart entry that runs ``argv`` at logon (no window, no menu entry)."""
    return (
        "[Desktop Entry]\n"
        "Type=Application\n"
        f"Name={_desktop_text(description)}\n"
        f"Exec={desktop_exec_quote(argv)}\n"
        f"Path={_desktop_text(str(cwd))}\n"
        "Terminal=false\n"
        "NoDisplay=true\n"
        "X-GNOME-Autostart-enabled=true\n"
    )


def _desktop_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def task_scheduler_xml(description: str, argv: Sequence[str], cwd: Path, user: str) -> str:
    """A Task Scheduler task that runs ``argv`` when ``user`` logs on, as that user, without
    elevation, on battery too, with no time limit (``schtasks /Create /XML``). A non-administrator
    may register a logon trigger only for themselves (MS-TSCH 3.2.5.4.2): hence the explicit user."""
    from xml.sax.saxutils import escape  # rarely needed: not at the agent's start

    command, *arguments = argv
    return (
        '<?xml version="1.0" encoding="UTF-16"?>\n'
        '<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">\n'
        f"  <RegistrationInfo><Description>{escape(description)}</Description></RegistrationInfo>\n"
        "  <Triggers><LogonTrigger><Enabled>true</Enabled>"
        f"<UserId>{escape(user)}</UserId></LogonTrigger></Triggers>\n"
        f'  <Principals><Principal id="Author"><UserId>{escape(user)}</UserId>'
        "<LogonType>InteractiveToken</LogonType><RunLevel>LeastPrivilege</RunLevel></Principal></Principals>\n"
        "  <Settings><MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>"
        "<DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>"
        "<StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>"
        "<ExecutionTimeLimit>PT0S</ExecutionTimeLimit><Enabled>true</Enabled></Settings>\n"
        '  <Actions Context="Author"><Exec>'
        f"<Command>{escape(command)}</Command>"
        f"<Arguments>{escape(subprocess.list2cmdline(arguments))}</Arguments>"
        f"<WorkingDirectory>{escape(str(cwd))}</WorkingDirectory>"
        "</Exec></Actions>\n"
        "</Task>\n"
    )


def windows_user(environ: Mapping[str, str] | None = None) -> str:
    """``DOMAIN\\user`` of the person running this (Windows' environment)."""
    environ = os.environ if environ is None else environ
    user = environ.get("USERNAME") or os.getlogin()
    domain = environ.get("USERDOMAIN")
    return f"{domain}\\{user}" if domain else user


def schtasks_create(task: str, xml_file: Path) -> list[str]:
    return ["schtasks", "/Create", "/TN", task, "/XML", str(xml_file), "/F"]


def schtasks_delete(task: str) -> list[str]:
    return ["schtasks", "/Delete", "/TN", task, "/F"]


def schtasks_query(task: str) -> list[str]:
    return ["schtasks", "/Query", "/TN", task]


if __name__ == "__main__":
    sys.exit(detach_main(sys.argv[1:]))


# -- the blocks a file holds (issue 39 item 7: the final state on a disk full since the start) --


def allocated_bytes(stat: os.stat_result) -> int | None:
    """Bytes the file system has allocated to a file (whole blocks, at least its size on disk);
    None where the system does not say (Windows: ``st_blocks`` is POSIX only)."""
    if sys.platform == "win32":
        return None
    return int(stat.st_blocks) * 512
