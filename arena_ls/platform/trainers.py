"""The trainer as the agent's child: its process group or job object, its pipes, and its orphans.

POSIX: a new session, death with the agent (Linux ``PR_SET_PDEATHSIG``),
large pipes, the agent as a subreaper. Windows: created suspended in a
kill-on-close job of its own per attempt, with large pipes.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from arena_ls.platform.launching import interpreter_without_launcher, launcher_env
from arena_ls.platform.winapi import (
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    CREATE_SUSPENDED,
    Win32,
    _process_handle,
    win32,
)

log = logging.getLogger(__name__)


PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
F_SETPIPE_SZ = 1031
F_GETPIPE_SZ = 1032
TRAINER_PIPE_BYTES = 1 << 20


"""1 MiB: Linux's default ceiling for an unprivileged pipe (``/proc/sys/fs/pipe-max-size``);
on Windows the buffer size asked of ``CreatePipe``."""


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
