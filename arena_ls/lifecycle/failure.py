"""Why a run died: classify from its exit status and the tail of its log.

Classes (the contract's ``failure.kind``): ``oom`` (CUDA or host out of
memory), ``killed`` (SIGKILL or exit 137, what the kernel's OOM killer does),
``nan`` (a loss announced as NaN or inf), ``disk-full`` (a write failed for
lack of space: ENOSPC), ``crash-loop`` (decided by the
watchdog, not here) and ``error`` (any other non-zero exit). ``evidence`` is
the log line that shows it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from arena_ls.lifecycle.rundir import Failure

_OOM = re.compile(
    r"(CUDA out of memory|OutOfMemoryError|out of memory|MemoryError|"
    r"CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|std::bad_alloc)",
    re.IGNORECASE,
)
_DISK_FULL = re.compile(
    r"(No space left on device|\bENOSPC\b|\[Errno 28\]|Disk quota exceeded)", re.IGNORECASE
)
_NAN = re.compile(r"\b(loss|grad)\b[^\n]{0,40}\b(nan|inf)\b", re.IGNORECASE)


def classify(
    *,
    exit_code: int | None,
    signal_name: str | None,
    tail: Sequence[str],
    nan_evidence: str | None,
) -> Failure | None:
    """The failure of a finished trainer, or None when it exited 0."""
    if exit_code == 0 and signal_name is None:
        return None
    oom_line = _last_match(tail, _OOM)
    if oom_line is not None:
        return Failure("oom", oom_line)
    disk_line = _last_match(tail, _DISK_FULL)
    if disk_line is not None:
        return Failure("disk-full", disk_line)
    if signal_name == "SIGKILL" or exit_code == 137:
        status = "SIGKILL" if signal_name else "exit code 137"
        return Failure("killed", f"trainer was killed ({status}), as the kernel's OOM killer does")
    if nan_evidence is not None:
        return Failure("nan", nan_evidence)
    nan_line = _last_match(tail, _NAN)
    if nan_line is not None:
        return Failure("nan", nan_line)
    last = _last_meaningful(tail)
    how = f"signal {signal_name}" if signal_name else f"exit code {exit_code}"
    return Failure("error", last or f"trainer ended with {how}")


def _last_match(lines: Sequence[str], pattern: re.Pattern[str]) -> str | None:
    for line in reversed(lines):
        if pattern.search(line):
            return line.strip()
    return None


def _last_meaningful(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith("@arena "):
            return stripped
    return None
