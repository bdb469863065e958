"""Windows' side of the platform: its constants, structures and error codes, and ``Win32``.

``Win32`` is a thin checked wrapper around the calls arena-ls makes (job
objects, handles, files); ``win32()`` loads it once, on Windows only. The
tests replace it with a recording fake (tests/windows/test_win32_fakes.py).
The constants are defined on every platform, so the POSIX branch and the
tests can name them too.
"""

from __future__ import annotations

import ctypes
import errno
import sys
from collections.abc import Callable
from typing import Any

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


def _process_handle(process: Any) -> int:
    """The Windows process handle a ``Popen`` keeps (``Popen._handle``, CPython's own attribute)."""
    return int(process._handle)
