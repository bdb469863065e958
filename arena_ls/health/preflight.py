"""Pre-flight checks: refuse a start that would fail or hurt the machine.

Plain functions over :class:`~arena_ls.health.hardware.Hardware` and the
settings; the server turns failed checks into the ``preflight-failed`` error
(contract 4.3) with ``error.data.checks`` from :func:`check_to_wire`.
``docs/preflight.md`` describes every check.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Literal

import attrs
import psutil

from arena_ls.health.checkpoint_history import CheckpointHistory
from arena_ls.health.hardware import Hardware
from arena_ls.health.model import Gpu, GpuProcess, GpuReading
from arena_ls.run.state_folder import make_state_folder
from arena_ls.settings import PreflightSettings

JobKind = Literal["train", "task"]


@attrs.frozen
class Check:
    """One pre-flight check's outcome."""

    name: str
    ok: bool
    message: str


def check_to_wire(check: Check) -> dict[str, Any]:
    """``{name, ok, message}`` as in ``error.data.checks``."""
    return {"name": check.name, "ok": check.ok, "message": check.message}


def run_preflight(
    *,
    kind: JobKind,
    hw: Hardware,
    settings: PreflightSettings,
    checkpoint_dir: Path,
    state_dir: Path,
    our_pids: AbstractSet[int],
    gate_errors: list[str] | None,
    reboot_pending: Callable[[], str | None] | None = None,
    checkpoints: CheckpointNeed | None = None,
) -> tuple[list[Check], list[str]]:
    """Run the checks for a job of this kind; return them and the warning lines.

    ``task`` jobs run only ``state-dir`` and ``disk``; ``train`` jobs run
    ``power``, ``ram``, ``gpu-contention``, ``disk``, ``state-dir`` and
    ``gates``. Every check runs even when an earlier one failed, so the user
    sees everything to fix at once. ``gate_errors`` holds the trainer's
    error-severity gate findings as lines, or None when the job has no trainer.
    Paths should be absolute. With ``reboot_pending`` (what says the machine waits for a
    restart: ``platform.reboot_pending``) a ``train`` job gets the ``reboot-pending`` check
    too, a warning that never refuses the start.
    """
    if kind == "task":
        return [check_state_dir(state_dir), check_disk(hw, settings, checkpoint_dir, state_dir)], []
    contention, warnings = check_gpu_contention(hw.gpus(), settings, our_pids)
    checks = [
        check_power(hw, settings),
        check_ram(hw, settings),
        contention,
        check_disk(hw, settings, checkpoint_dir, state_dir, checkpoints),
        check_state_dir(state_dir),
        check_gates(gate_errors),
    ]
    if reboot_pending is not None:
        pending, warning = check_reboot_pending(reboot_pending)
        checks.append(pending)
        warnings.extend(warning)
    return checks, warnings


def check_reboot_pending(reboot_pending: Callable[[], str | None]) -> tuple[Check, list[str]]:
    """``reboot-pending`` (contract 8.3), a warning: the machine waits for a restart (Windows
    Update, a pending file rename, Linux's ``/var/run/reboot-required``), which may come
    during the run; the run resumes from its checkpoint after it (``watchdog.afterReboot``)."""
    try:
        why = reboot_pending()
    except OSError as error:
        return Check("reboot-pending", True, f"not known: {error}"), []
    if why is None:
        return Check("reboot-pending", True, "no restart pending"), []
    warning = (
        f"the machine waits for a restart ({why}); it may restart during the run (Windows Update "
        "does at night): restart first, or keep checkpoints frequent"
    )
    return Check("reboot-pending", True, f"a restart is pending: {why} (warned)"), [warning]


def check_power(hw: Hardware, settings: PreflightSettings) -> Check:
    battery = hw.battery()
    if battery is None:
        return Check("power", True, "no battery (mains power)")
    level = f"{battery.percent:.0f}%"
    if battery.plugged_in is None:
        return Check("power", True, f"battery at {level}; power source unknown")
    if battery.plugged_in:
        return Check("power", True, f"plugged in (battery {level})")
    if settings.require_plugged_in:
        return Check(
            "power",
            False,
            f"on battery ({level}); plug in or set arena.preflight.requirePluggedIn to false",
        )
    return Check("power", True, f"on battery ({level}); allowed by arena.preflight.requirePluggedIn")


def check_ram(hw: Hardware, settings: PreflightSettings) -> Check:
    ram = hw.ram()
    need = settings.min_free_ram_mb
    if ram.available_mb >= need:
        return Check("ram", True, f"{ram.available_mb} MB available (need {need} MB)")
    return Check(
        "ram",
        False,
        f"only {ram.available_mb} MB of RAM available, need {need} MB; close programs "
        f"or lower arena.preflight.minFreeRamMb",
    )


def check_gpu_contention(
    reading: GpuReading, settings: PreflightSettings, our_pids: AbstractSet[int]
) -> tuple[Check, list[str]]:
    """Foreign compute processes on any GPU; returns the check and warning lines."""
    mode = settings.gpu_contention
    if mode == "off":
        return Check("gpu-contention", True, "not checked (arena.preflight.gpuContention is off)"), []
    if not reading.gpus:
        reason = reading.error or "no GPU found"
        return Check("gpu-contention", True, f"no GPU to check: {reason}"), []
    foreign = [
        describe_foreign_process(gpu, process)
        for gpu in reading.gpus
        for process in gpu.processes
        if process.pid not in our_pids
    ]
    incomplete = f" (GPU reading incomplete: {reading.error})" if reading.error else ""
    if not foreign:
        count = len(reading.gpus)
        return Check("gpu-contention", True, f"no foreign process on {count} GPU(s){incomplete}"), []
    busy = "; ".join(foreign)
    if mode == "warn":
        warning = f"GPU in use by another process: {busy}; starting anyway (gpuContention is warn)"
        return Check("gpu-contention", True, f"{busy} (warned){incomplete}"), [warning]
    return Check(
        "gpu-contention",
        False,
        f"GPU in use by another process: {busy}; stop it, or set "
        f'arena.preflight.gpuContention to "warn"{incomplete}',
    ), []


def describe_foreign_process(gpu: Gpu, process: GpuProcess) -> str:
    """e.g. ``GPU 0: pid 4242 (python3) holds 3120 MB``."""
    name = process_name(process.pid)
    who = f"pid {process.pid}" + (f" ({name})" if name else "")
    if process.used_memory_mb is None:
        return f"GPU {gpu.index}: {who} holds an unknown amount of memory"
    return f"GPU {gpu.index}: {who} holds {process.used_memory_mb} MB"


def process_name(pid: int) -> str | None:
    """The process's name, or None when it is gone or not ours to see."""
    try:
        name = psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return None
    return str(name) or None


def check_disk(
    hw: Hardware,
    settings: PreflightSettings,
    checkpoint_dir: Path,
    state_dir: Path | None = None,
    checkpoints: CheckpointNeed | None = None,
) -> Check:
    """Free space where the checkpoints go and where the run's state and log go (the state folder).

    The two are often different filesystems; the check fails on the one with
    the least space, and names it. With ``checkpoints`` (what the job's
    checkpoints will still take, from its earlier runs), their folder needs
    that much more than the floor (contract 8.2).
    """
    floor = settings.min_free_disk_mb
    places = [checkpoints.folder if checkpoints is not None else checkpoint_dir]
    places += [state_dir] if state_dir is not None else []
    readings: list[tuple[int, int, Path]] = []
    for index, place in enumerate(places):
        extra = checkpoints.need_mb if checkpoints is not None and index == 0 else 0
        try:
            readings.append((hw.disk_free_mb(place), floor + extra, place))
        except OSError as error:
            return Check("disk", False, f"cannot read free space at {place}: {error}")
    short = [reading for reading in readings if reading[0] < reading[1]]
    why = f": {checkpoints.describe()}, plus the {floor} MB floor" if checkpoints is not None else ""
    if not short:
        text = ", ".join(f"{mb} MB free at {place} (need {need} MB)" for mb, need, place in readings)
        return Check("disk", True, text + why)
    free, need, where = min(short, key=lambda reading: reading[0] - reading[1])
    if checkpoints is not None and where == checkpoints.folder:
        return Check(
            "disk",
            False,
            f"only {free} MB free at {where}, need {need} MB{why}; free some space, keep fewer "
            "checkpoints, save them to another disk, or lower arena.preflight.minFreeDiskMb",
        )
    return Check(
        "disk",
        False,
        f"only {free} MB free at {where}, need {need} MB; free some space "
        f"or lower arena.preflight.minFreeDiskMb",
    )


MB = 1024 * 1024
SIZE_ENTRIES = 2000
"""At most this many files of a checkpoint folder are looked at (the check runs as a start begins)."""


@attrs.frozen
class CheckpointNeed:
    """What a job's checkpoints will still take on their disk until its last step (contract 8.2).

    A trainer whose every announced checkpoint file still exists keeps them
    all: each save left adds one checkpoint's size, and the saves left are the
    steps left over its cadence (the steps per save so far: the last
    checkpoint's step over the files it kept). A trainer that saves over one
    file, or deletes old ones as it goes, needs one more checkpoint's size (a
    save through a temporary file holds two at once).
    """

    folder: Path
    save_bytes: int
    saves_left: int
    accumulate: bool
    step: int
    total: int

    @property
    def need_mb(self) -> int:
        saves = self.saves_left if self.accumulate else 1
        return -(-self.save_bytes * saves // MB)

    def describe(self) -> str:
        size = f"{-(-self.save_bytes // MB)} MB"
        if not self.accumulate:
            return f"the job's checkpoints need room for one more save of {size} (it keeps no more files)"
        return (
            f"the job's checkpoints need {self.need_mb} MB more: {self.saves_left} saves of {size} "
            f"left (step {self.step} of {self.total}; it keeps every checkpoint it saves)"
        )


def checkpoint_need(history: CheckpointHistory | None, cwd: Path) -> CheckpointNeed | None:
    """What the job's checkpoints will still take, from what its runs announced; None when unknown
    (no checkpoint yet, no known last step, the last checkpoint gone, or the job at its end)."""
    if history is None or history.total_steps is None or not history.paths:
        return None
    steps_left = history.total_steps - history.last_step
    if steps_left <= 0 or history.last_step <= 0:
        return None
    absolute = [Path(p) if os.path.isabs(p) else cwd / p for p in history.paths]
    last = absolute[-1]
    save_bytes = _size(last)
    if save_bytes is None or save_bytes <= 0:
        return None
    kept = sum(1 for path in absolute if path.exists())
    accumulate = len(absolute) >= 2 and kept == len(absolute)
    per_save = history.last_step / kept
    saves_left = max(1, -(-steps_left // max(1, round(per_save))))
    return CheckpointNeed(
        last.parent, save_bytes, saves_left, accumulate, history.last_step, history.total_steps
    )


def _size(path: Path) -> int | None:
    """A checkpoint's bytes: a file's size, or a folder's files' (``SIZE_ENTRIES`` at most)."""
    try:
        if not path.is_dir():
            return path.stat().st_size
    except OSError:
        return None
    total, seen = 0, 0
    for root, _, files in os.walk(path):
        for name in files:
            seen += 1
            if seen > SIZE_ENTRIES:
                return total
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def check_state_dir(state_dir: Path) -> Check:
    """Create the state folder if needed and write, then remove, a file in it."""
    try:
        make_state_folder(state_dir)
        handle, probe = tempfile.mkstemp(prefix=".preflight-", dir=state_dir)
        try:
            os.write(handle, b"ok")
        finally:
            os.close(handle)
            os.unlink(probe)
    except OSError as error:
        return Check("state-dir", False, f"state folder {state_dir} is not writable: {error}")
    return Check("state-dir", True, f"{state_dir} is writable")


def check_gates(gate_errors: Sequence[str] | None) -> Check:
    if gate_errors is None:
        return Check("gates", True, "not a train job")
    if not gate_errors:
        return Check("gates", True, "no error-severity gate findings")
    count = len(gate_errors)
    return Check("gates", False, f"{count} gate error(s): " + "; ".join(gate_errors))


def wait_gpu_released(
    hw: Hardware, pids: AbstractSet[int], timeout_s: float, *, poll_s: float = 0.25
) -> list[tuple[int, int]]:
    """Wait until none of ``pids`` holds GPU memory; return ``(pid, MB)`` still held at the end.

    Used before a watchdog relaunch, once the old process tree is gone, since
    the driver can take a moment to release its memory. Blocks the calling
    thread for at most about ``timeout_s``. A process listed with unknown
    memory counts as holding 0 MB (still listed). Where GPUs cannot be read,
    returns an empty list at once.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        held = gpu_memory_held(hw.gpus(), pids)
        remaining = deadline - time.monotonic()
        if not held or remaining <= 0:
            return held
        time.sleep(min(poll_s, remaining))


def gpu_memory_held(reading: GpuReading, pids: AbstractSet[int]) -> list[tuple[int, int]]:
    """``(pid, MB)`` for each of ``pids`` listed as a compute process, per GPU."""
    return [
        (process.pid, process.used_memory_mb or 0)
        for gpu in reading.gpus
        for process in gpu.processes
        if process.pid in pids
    ]
