"""What a run has on each disk, read for ``disk-runway`` on a worker thread (a folder walk reads
every entry's metadata).

The run's checkpoints are the paths it announced that still exist (relative
ones against the job's working folder), each a file or a folder (walked,
bounded by ``MAX_ENTRIES`` in all); its log is its run folder in the state
folder. Each is counted on the disk it is on (its device), with that disk's
free space as the ``Hardware`` reads it (the real machine, or a test's fake).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from arena_ls.insights.model import DiskSample

MB = 1024 * 1024
SAMPLE_SECONDS = 5.0
"""How often the runs' disks are read."""
MAX_ENTRIES = 20_000
"""At most this many files and folders are looked at for one run's reading."""


@attrs.frozen
class DiskReading:
    """One disk as one run uses it, now."""

    device: str
    label: str
    sample: DiskSample


@attrs.define
class _Disk:
    where: Path
    used: int = 0
    checkpoint_folders: list[str] = attrs.field(factory=list)
    log: bool = False


def read_run_disks(
    cwd: Path,
    checkpoint_paths: Iterable[str],
    run_folder: Path,
    free_mb: Callable[[Path], int],
    now: float,
) -> list[DiskReading]:
    """Each disk the run's checkpoints or log are on: what they take there, and its free space."""
    disks: dict[int, _Disk] = {}
    budget = [MAX_ENTRIES]
    for text in checkpoint_paths:
        path = Path(text) if os.path.isabs(text) else cwd / text
        device = _device(path)
        if device is None:
            continue  # deleted (a trainer that keeps its last few), or never written
        disk = disks.setdefault(device, _Disk(path))
        disk.used += path_bytes(path, budget)
        folder = str(path.parent)
        if folder not in disk.checkpoint_folders:
            disk.checkpoint_folders.append(folder)
    device = _device(run_folder)
    if device is not None:
        disk = disks.setdefault(device, _Disk(run_folder))
        disk.used += path_bytes(run_folder, budget)
        disk.log = True
    readings = []
    for device, disk in disks.items():
        try:
            free = free_mb(disk.where) * MB
        except OSError:
            continue
        readings.append(DiskReading(str(device), _label(disk), DiskSample(now, disk.used, free)))
    return readings


def _label(disk: _Disk) -> str:
    parts = []
    if disk.checkpoint_folders:
        folders = disk.checkpoint_folders
        where = folders[-1] + (f" (and {len(folders) - 1} more folders)" if len(folders) > 1 else "")
        parts.append(f"the checkpoints in {where}")
    if disk.log:
        parts.append("the run's log")
    return " and ".join(parts)


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def path_bytes(path: Path, budget: list[int]) -> int:
    """The bytes of a file, or of everything in a folder (``budget[0]`` entries at most, shared)."""
    try:
        if not path.is_dir():
            budget[0] -= 1
            return path.stat().st_size
    except OSError:
        return 0
    total = 0
    stack = [path]
    while stack and budget[0] > 0:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    budget[0] -= 1
                    if budget[0] <= 0:
                        break
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total
