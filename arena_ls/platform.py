"""Every difference between POSIX and Windows, in one place.

Process groups, detaching, the cooperative signal (SIGTERM or
CTRL_BREAK_EVENT), tying a trainer's life to its agent, and killing a whole
process tree. Both branches are written; the tests run the POSIX one.

psutil is imported inside the functions that need it: the job agent starts
its trainer through this module before it loads anything heavy.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

log = logging.getLogger(__name__)

IS_WINDOWS = sys.platform == "win32"

# Windows creation flags (defined here so the POSIX branch can name them too).
CREATE_NEW_PROCESS_GROUP = 0x00000200
DETACHED_PROCESS = 0x00000008
CREATE_NO_WINDOW = 0x08000000
CREATE_BREAKAWAY_FROM_JOB = 0x01000000

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
F_SETPIPE_SZ = 1031
F_GETPIPE_SZ = 1032
TRAINER_PIPE_BYTES = 1 << 20
"""1 MiB: Linux's default ceiling for an unprivileged pipe (``/proc/sys/fs/pipe-max-size``)."""


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


def spawn_detached(argv: Sequence[str], *, cwd: Path, log_file: Path) -> subprocess.Popen[bytes]:
    """Start the job agent so that it outlives the server and the editor.

    POSIX: a new session (no controlling terminal, its own process group), so
    a signal to the editor's or server's group never reaches it. Windows: a new
    process group, no console, and out of the editor's job object, since VS
    Code kills its job's processes when it closes.
    """
    with open(log_file, "ab") as agent_log:
        kwargs: dict[str, Any] = {
            "cwd": str(cwd),
            "stdin": subprocess.DEVNULL,
            "stdout": subprocess.DEVNULL,
            "stderr": agent_log,
            "close_fds": True,
        }
        if IS_WINDOWS:
            kwargs["creationflags"] = CREATE_NEW_PROCESS_GROUP | DETACHED_PROCESS | CREATE_BREAKAWAY_FROM_JOB
        else:
            kwargs["start_new_session"] = True
        return subprocess.Popen(list(argv), **kwargs)


def _die_with_parent() -> None:
    """In the trainer, before exec: receive SIGKILL when the agent dies (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


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
    also dies with its agent, so a trainer is never left running unmanaged;
    on Windows the agent puts it in a kill-on-close job object instead.
    """
    kwargs: dict[str, Any] = {
        "cwd": str(cwd),
        "env": env,
        "stdin": subprocess.DEVNULL,
        "stdout": stdout,
        "stderr": stderr,
        "close_fds": True,
    }
    if IS_WINDOWS:
        kwargs["creationflags"] = CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
    else:
        kwargs["start_new_session"] = True
        if sys.platform.startswith("linux"):
            kwargs["preexec_fn"] = _die_with_parent
    process = subprocess.Popen(list(argv), **kwargs)
    if IS_WINDOWS:
        _assign_kill_on_close_job(process)
    return process


def enlarge_pipe(fd: int, size: int = TRAINER_PIPE_BYTES) -> int | None:
    """Linux: grow a pipe's buffer; the new size, or None where that cannot be done.

    With the default 64 KiB a trainer that writes line by line fills the pipe
    within a fraction of a millisecond and then waits for the agent at every
    few lines; a larger pipe lets the agent read it in batches.
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
    if IS_WINDOWS:
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


def _assign_kill_on_close_job(process: subprocess.Popen[bytes]) -> None:
    """Windows: put the trainer in a job object that dies with the agent."""
    if not IS_WINDOWS:
        return
    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined,unused-ignore]
    job = kernel32.CreateJobObjectW(None, None)
    if not job:
        log.warning("could not create a job object for the trainer")
        return

    class _BasicLimits(ctypes.Structure):
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

    class _IoCounters(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("r", "w", "o", "rb", "wb", "ob")]

    class _ExtendedLimits(ctypes.Structure):
        _fields_ = [
            ("BasicLimitInformation", _BasicLimits),
            ("IoInfo", _IoCounters),
            ("ProcessMemoryLimit", ctypes.c_size_t),
            ("JobMemoryLimit", ctypes.c_size_t),
            ("PeakProcessMemoryUsed", ctypes.c_size_t),
            ("PeakJobMemoryUsed", ctypes.c_size_t),
        ]

    job_object_limit_kill_on_job_close = 0x2000
    job_object_extended_limit_information = 9
    limits = _ExtendedLimits()
    limits.BasicLimitInformation.LimitFlags = job_object_limit_kill_on_job_close
    kernel32.SetInformationJobObject(
        job, job_object_extended_limit_information, ctypes.byref(limits), ctypes.sizeof(limits)
    )
    handle = getattr(process, "_handle", None)
    if handle is None or not kernel32.AssignProcessToJobObject(job, int(handle)):
        log.warning("could not assign the trainer to its job object")
    # The job handle stays open for the agent's lifetime on purpose: when the
    # agent dies, Windows closes it and kills the trainer's tree.


def send_cooperative_signal(pid: int) -> bool:
    """Ask a trainer to stop: SIGTERM on POSIX, CTRL_BREAK_EVENT on Windows.

    Windows delivers CTRL_BREAK_EVENT to the process group that the trainer
    leads (it was started with CREATE_NEW_PROCESS_GROUP).
    """
    if IS_WINDOWS:
        return _windows_ctrl_break(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError, OSError):
        return False
    return True


def _windows_ctrl_break(pid: int) -> bool:
    """CTRL_BREAK_EVENT to the trainer's group from a console-less (detached) agent.

    A console control event only reaches processes sharing the sender's
    console, and the agent has none: it attaches to the trainer's console for
    the moment of sending, ignoring the event itself, then detaches.
    """
    kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined,unused-ignore]
    ctrl_break_event = 1
    kernel32.FreeConsole()
    if not kernel32.AttachConsole(pid):
        return False
    try:
        kernel32.SetConsoleCtrlHandler(None, True)
        return bool(kernel32.GenerateConsoleCtrlEvent(ctrl_break_event, pid))
    finally:
        kernel32.FreeConsole()
        kernel32.SetConsoleCtrlHandler(None, False)


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
    import psutil

    if IS_WINDOWS:
        return []
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
    found through the process group the trainer leads. ``pgid`` defaults to
    ``pid`` since the trainer is started as a group leader. With
    ``own_child`` the root is our child: it is killed but not waited for here,
    because waiting would reap it and steal its exit status from ``Popen``.
    """
    import psutil

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
    process). Windows has no process groups to search: there the job object
    kills the tree. Returns the pids that survived.
    """
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


def wait_pid_gone(pid: int, create_time: float | None, timeout: float) -> bool:
    """Wait until the process is gone; True when it is."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while time.monotonic() < deadline:
        if not is_same_process(pid, create_time):
            return True
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
    return not is_same_process(pid, create_time)


def describe_signal(returncode: int) -> tuple[int | None, str | None]:
    """Split a Popen return code into (exitCode, signal name)."""
    if returncode < 0 and not IS_WINDOWS:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"SIG{-returncode}"
        return None, name
    return returncode, None


def try_lock_file(fd: int) -> bool:
    """Take an exclusive, non-blocking OS lock on an open file; False when another holds it.

    The kernel releases it when the holder closes the file or dies, so a
    crashed holder never leaves it taken. POSIX: ``flock``; Windows: a
    one-byte ``msvcrt.locking`` region.
    """
    if IS_WINDOWS:
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (BlockingIOError, PermissionError):
        return False
    return True


def unlock_file(fd: int) -> None:
    """Release a lock taken by ``try_lock_file``."""
    if IS_WINDOWS:
        import msvcrt

        with contextlib.suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]
        return
    import fcntl

    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
