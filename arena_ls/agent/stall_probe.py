"""The evidence of a stall: the trainer's Python stacks (``py-spy dump``), its GPU use, in words.

``py-spy`` is one of the project's dependencies; its wheel ships only the
executable, which pip puts beside the interpreter (a venv's ``bin/`` or
``Scripts\\``) or in the interpreter's scripts folder. Reading another
process's stacks needs the right to trace it: as root, or as its user where
the kernel allows it (``kernel.yama.ptrace_scope`` 0 on Linux); macOS needs
root. Where it cannot, the evidence says why there is no stack, and the rest
of the evidence (the last lines, the CPU time, the GPU use) still stands.
Nothing here decides anything (``stall.judge`` does).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import attrs

from arena_ls import platform
from arena_ls.health.model import GpuReading

DUMP_TIMEOUT = 20.0
"""How long one ``py-spy dump`` may take (it pauses the process for a few milliseconds)."""
STACK_LINES = 80
"""At most this many lines of a dump go into the run's log."""
TRIED_PIDS = 4
"""The trainer's process, then up to this many of its descendants (a launcher runs Python as a child)."""


@attrs.frozen
class StackDump:
    """The stacks of the trainer's Python process, or why there are none."""

    lines: tuple[str, ...] = ()
    pid: int | None = None
    """The process the stacks are of."""
    why_none: str | None = None

    def compact(self) -> str:
        """The first thread's frames on one line, innermost first: ``hang (train.py:40) < main (...)``."""
        frames: list[str] = []
        for line in self.lines:
            if line.startswith("Thread ") and frames:
                break
            if line.startswith((" ", "\t")) and line.strip():
                frames.append(line.strip())
        return " < ".join(frames[:6])


def find_py_spy(
    executable: str = sys.executable, exists: Callable[[Path], bool] = Path.is_file
) -> Path | None:
    """The ``py-spy`` installed with this interpreter's packages; else one on PATH; else None."""
    name = platform.console_script("py-spy")
    folders = [Path(executable).parent, Path(sysconfig.get_path("scripts"))]
    for folder in folders:
        candidate = folder / name
        if exists(candidate):
            return candidate
    found = shutil.which(name)
    return Path(found) if found else None


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=DUMP_TIMEOUT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def dump_stacks(pids: Iterable[int], py_spy: Path | None, run: Runner = _run) -> StackDump:
    """``py-spy dump --pid`` of the first of ``pids`` that is a Python process it can read."""
    if py_spy is None:
        return StackDump(
            why_none="py-spy is not installed beside this interpreter nor on PATH "
            "(it comes with arena-ls: pip install py-spy)"
        )
    first_error: str | None = None
    for pid in list(pids)[:TRIED_PIDS]:
        try:
            done = run([str(py_spy), "dump", "--pid", str(pid)])
        except subprocess.TimeoutExpired:
            first_error = first_error or f"py-spy dump of process {pid} took over {DUMP_TIMEOUT:g}s"
            continue
        except OSError as error:
            return StackDump(why_none=f"py-spy could not be run ({error})")
        if done.returncode == 0 and done.stdout.strip():
            lines = tuple(done.stdout.rstrip().splitlines()[:STACK_LINES])
            return StackDump(lines=lines, pid=pid)
        reason = why_dump_failed(pid, done.stdout + "\n" + done.stderr)
        if "permission" in reason:
            return StackDump(why_none=reason)  # the same for every process of the tree
        first_error = first_error or reason
    return StackDump(why_none=first_error or "the trainer's process is gone")


def why_dump_failed(pid: int, output: str) -> str:
    """The words of a failed dump: permission denied said as such, else py-spy's first line."""
    lowered = output.lower()
    if "permission" in lowered or "not permitted" in lowered:
        return (
            f"permission denied reading process {pid}'s stacks (py-spy needs the right to trace it: "
            "root, or the same user with kernel.yama.ptrace_scope 0)"
        )
    first = next((line.strip() for line in output.splitlines() if line.strip()), "no output")
    return f"py-spy could not read process {pid}: {first[:200]}"


def gpu_busy(reading: GpuReading, pids: set[int]) -> tuple[int | None, str | None]:
    """The highest utilisation of a GPU one of ``pids`` is on, or (None, why none is known)."""
    on_ours = [gpu for gpu in reading.gpus if any(p.pid in pids for p in gpu.processes)]
    if not on_ours:
        if reading.error and not reading.gpus:
            return None, reading.error
        return None, "the trainer is on no GPU that could be read"
    known = [gpu.utilization for gpu in on_ours if gpu.utilization is not None]
    if not known:
        return None, "its GPU reports no utilisation"
    return max(known), None
