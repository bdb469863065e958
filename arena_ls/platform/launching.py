"""Starting the job agent: command-line limits, the interpreter without a venv launcher,
detaching (a new session / the ``detach`` intermediate and a kill-on-close job), the spare agent.

``python -m arena_ls.platform detach REQUEST`` (``detach_main``) is the Windows intermediate.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from arena_ls.platform.winapi import (
    CREATE_BREAKAWAY_FROM_JOB,
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    CREATE_SUSPENDED,
    ERROR_ACCESS_DENIED,
    Win32,
    _process_handle,
    win32,
)

log = logging.getLogger(__name__)


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
