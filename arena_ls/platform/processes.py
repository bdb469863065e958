"""Processes by pid: who a pid is, the cooperative stop signal, killing a whole tree,
how a process ended, the OOM killer's count, a thread's CPU time.

psutil is imported inside the functions that need it: the job agent starts
its trainer through this package before it loads anything heavy.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from arena_ls.platform.trainers import end_attempt_job, terminate_attempt_job
from arena_ls.platform.winapi import win32

if TYPE_CHECKING:
    import psutil


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
