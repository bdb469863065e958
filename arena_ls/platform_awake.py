"""Keeping the machine awake while a run trains (contract 8.3, ``power.keepAwake``): each platform's way.

Part of ``arena_ls.platform`` (every platform difference lives there or in a
module it owns, like this one), kept apart because the job agent is the only
user. Each way is a hold that the agent takes when its ``train`` run starts
and releases when the run ends; each is also let go by the operating system
when the agent dies, so a ``kill -9`` of the agent never leaves the machine
awake for nothing:

- Linux: a logind ``sleep:idle`` inhibitor lock, taken over the system bus
  with jeepney (``org.freedesktop.login1.Manager.Inhibit``). The lock is a
  file descriptor: it holds while the descriptor is open and goes with the
  process. ``ARENA_LOGIND_BUS_ADDRESS`` names another bus to ask (the tests'
  own ``dbus-daemon`` with a fake logind); unset, the system bus.
- Windows: ``SetThreadExecutionState(ES_CONTINUOUS | ES_SYSTEM_REQUIRED)``,
  set and cleared on one thread of its own that lives as long as the hold
  (the state belongs to the thread that set it, and to the process).
- macOS: ``caffeinate -i -w AGENT_PID``, ended at the release; ``-w`` ends it
  by itself when the agent dies.

A platform that does not allow it (no system bus, logind refuses, no
caffeinate) raises ``AwakeUnavailable`` with the reason, which the agent
writes in the run's log (``RunInfo.keepAwake`` null).

Nothing here reads the settings: the agent decides whether to ask.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

LOGIND_BUS_ENV = "ARENA_LOGIND_BUS_ADDRESS"
"""A D-Bus address to ask for the inhibitor lock in place of the system bus (the tests' fake logind)."""
LOGIND_NAME = "org.freedesktop.login1"
LOGIND_PATH = "/org/freedesktop/login1"
LOGIND_MANAGER = "org.freedesktop.login1.Manager"
INHIBIT_WHAT = "sleep:idle"
INHIBIT_MODE = "block"
BUS_TIMEOUT = 5.0
"""How long the inhibitor's request may take (logind answers in milliseconds)."""

ES_CONTINUOUS = 0x80000000
ES_SYSTEM_REQUIRED = 0x00000001
KEEP_SYSTEM_AWAKE = ES_CONTINUOUS | ES_SYSTEM_REQUIRED
"""The execution state that keeps the system (not the display) awake until cleared."""
THREAD_START_TIMEOUT = 5.0

CAFFEINATE = "/usr/bin/caffeinate"


class AwakeUnavailable(Exception):
    """The platform does not allow keeping the machine awake; ``str()`` says why, for the run's log."""


class AwakeHold(Protocol):
    """A hold on the machine's wakefulness: ``release`` lets go (twice is harmless)."""

    @property
    def how(self) -> str:
        """What holds the machine awake, for the run's log."""

    def release(self) -> None: ...


def hold_awake(who: str, why: str, pid: int | None = None) -> AwakeHold:
    """Keep this machine from sleeping until ``release`` or until this process (``pid``) dies.

    ``who`` and ``why`` name the holder where the platform shows them
    (``systemd-inhibit --list``); ``AwakeUnavailable`` when it cannot be done.
    """
    holder = os.getpid() if pid is None else pid
    if sys.platform == "win32":
        return ExecutionStateHold(load_set_thread_execution_state())
    if sys.platform == "darwin":
        return CaffeinateHold(holder)
    if sys.platform.startswith("linux"):
        return LogindInhibitor(who, why, os.environ.get(LOGIND_BUS_ENV) or "SYSTEM")
    raise AwakeUnavailable(f"keeping the machine awake is not supported on {sys.platform}")


# --------------------------------------------------------------------------- Linux: logind


class LogindInhibitor:
    """A logind ``sleep:idle`` block lock, held as the file descriptor logind answered with."""

    def __init__(self, who: str, why: str, bus: str = "SYSTEM") -> None:
        self._fd: Any = _inhibit(bus, who, why)
        """jeepney's ``FileDescriptor``: closed when released, or when it is garbage (keep it)."""
        self.how = f"a logind {INHIBIT_WHAT} inhibitor lock"

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            fd.close()


def _inhibit(bus: str, who: str, why: str) -> Any:
    """Ask logind for the lock; its file descriptor (never inherited by a trainer started later)."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        from jeepney.wrappers import unwrap_msg
    except ImportError as error:
        raise AwakeUnavailable(f"jeepney is not installed ({error})") from error
    try:
        connection = open_dbus_connection(bus=bus, enable_fds=True)
    except (OSError, KeyError, ValueError, RuntimeError) as error:
        where = "the system bus" if bus == "SYSTEM" else bus
        raise AwakeUnavailable(f"cannot reach {where}: {error}") from error
    try:
        manager = DBusAddress(LOGIND_PATH, bus_name=LOGIND_NAME, interface=LOGIND_MANAGER)
        message = new_method_call(manager, "Inhibit", "ssss", (INHIBIT_WHAT, who, why, INHIBIT_MODE))
        reply = connection.send_and_get_reply(message, timeout=BUS_TIMEOUT)
        fd = unwrap_msg(reply)[0]
    except Exception as error:  # a D-Bus error (no logind, polkit refused), a timeout
        raise AwakeUnavailable(f"logind refused the inhibitor lock: {error}") from error
    finally:
        connection.close()
    os.set_inheritable(fd.fileno(), False)
    return fd


# --------------------------------------------------------------------------- Windows


SetExecutionState = Callable[[int], int]
"""``SetThreadExecutionState``: the flags in, the previous state out (0 on failure)."""


def load_set_thread_execution_state() -> SetExecutionState:
    """kernel32's ``SetThreadExecutionState`` with its result as an unsigned 32-bit state (Windows only)."""
    if sys.platform != "win32":
        raise AwakeUnavailable("SetThreadExecutionState is only available on Windows")
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
    function = kernel32.SetThreadExecutionState
    function.restype, function.argtypes = ctypes.c_uint32, [ctypes.c_uint32]

    def call(flags: int) -> int:
        return int(function(flags))

    return call


class ExecutionStateHold:
    """``ES_CONTINUOUS | ES_SYSTEM_REQUIRED`` set and later cleared on one thread of its own.

    The state is the thread's: set here and cleared on another thread, it
    would stay (and a thread pool's thread may never end). So one thread sets
    it, waits for the release, clears it and ends.
    """

    how = "SetThreadExecutionState(ES_CONTINUOUS | ES_SYSTEM_REQUIRED)"

    def __init__(self, set_state: SetExecutionState) -> None:
        self._set_state = set_state
        self._released = threading.Event()
        self._started = threading.Event()
        self._failure: str | None = None
        self._thread = threading.Thread(target=self._hold, name="keep-awake", daemon=True)
        self._thread.start()
        if not self._started.wait(THREAD_START_TIMEOUT):
            self._released.set()
            raise AwakeUnavailable("SetThreadExecutionState did not answer")
        if self._failure is not None:
            raise AwakeUnavailable(self._failure)

    def _hold(self) -> None:
        try:
            previous = self._set_state(KEEP_SYSTEM_AWAKE)
        except Exception as error:
            self._failure = f"SetThreadExecutionState failed: {error}"
            self._started.set()
            return
        if not previous:
            self._failure = "SetThreadExecutionState refused (it returned NULL)"
            self._started.set()
            return
        self._started.set()
        self._released.wait()
        self._set_state(ES_CONTINUOUS)

    def release(self) -> None:
        self._released.set()
        if self._thread is not threading.current_thread():
            self._thread.join(THREAD_START_TIMEOUT)


# --------------------------------------------------------------------------- macOS


Spawn = Callable[[Sequence[str]], "subprocess.Popen[bytes]"]


def _spawn_quiet(argv: Sequence[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


class CaffeinateHold:
    """``caffeinate -i -w PID``: idle sleep prevented until it is ended or ``PID`` exits."""

    def __init__(self, pid: int, spawn: Spawn = _spawn_quiet) -> None:
        self.argv = [CAFFEINATE, "-i", "-w", str(pid)]
        self.how = " ".join(self.argv)
        try:
            self._process: subprocess.Popen[bytes] | None = spawn(self.argv)
        except OSError as error:
            raise AwakeUnavailable(f"cannot start caffeinate: {error}") from error

    def release(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=THREAD_START_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
