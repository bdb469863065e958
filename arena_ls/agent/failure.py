"""Why a run died: classify from its exit status and the tail of its log.

Classes (the contract's ``failure.kind``): ``oom`` (CUDA or host out of
memory), ``killed`` (SIGKILL or exit 137: a person's ``kill -9``, a tool, or the
kernel's OOM killer; the kernel's count of OOM kills, where it can be read,
tells which),
``nan`` (a loss announced as NaN or inf), ``disk-full`` (a write failed for
lack of space: ENOSPC), ``crash-loop`` (decided by the
watchdog, not here) and ``error`` (any other non-zero exit). ``evidence`` is
the log line that shows it.

Two more are the relaunch policy's (``relaunch.py``, contract 7.1), built here
so that every kind has one home: ``resume-refused`` (launched with
``resume.args``, the trainer exited before announcing progress) and
``resume-unknown`` (no checkpoint is known, but a file the trainer saved exists).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from arena_ls import platform
from arena_ls.run.rundir import Failure

EVIDENCE_LINES = 40
"""How far from its end the trainer's output is read for out-of-memory evidence."""

_OOM = re.compile(
    # An exception line as a traceback ends (``torch.OutOfMemoryError: CUDA out of memory``,
    # ``MemoryError``), or the allocators' own words; not a sentence that mentions the name.
    r"^\s*(?:[\w.]+\.)?(?:OutOfMemoryError|MemoryError)\b(?::|$)"
    r"|^\s*RuntimeError: .*out of memory"
    r"|CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|std::bad_alloc",
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
    kind: str = "train",
    oom_kills: int | None = None,
) -> Failure | None:
    """The failure of a finished trainer, or None when it exited 0.

    ``tail`` is the trainer's own output (never the supervisor's lines);
    only its last ``EVIDENCE_LINES`` count as evidence of running out of
    memory, and only for a ``train`` job: a task that merely prints the
    word (``arena check`` reporting AR001, say) failed with an ``error``.
    ``oom_kills`` is how many processes the kernel's OOM killer ended while
    the trainer ran (``platform.oom_kill_count`` before and after), or None
    where that cannot be read: it decides the words of a ``killed`` failure.
    """
    if exit_code == 0 and signal_name is None:
        return None
    own = [line for line in tail if not line.lstrip().startswith("@arena ")]
    oom_line = _last_match(own[-EVIDENCE_LINES:], _OOM) if kind == "train" else None
    if oom_line is not None:
        return Failure("oom", oom_line)
    disk_line = _last_match(tail, _DISK_FULL)
    if disk_line is not None:
        return Failure("disk-full", disk_line)
    if signal_name == "SIGKILL" or exit_code == 137:
        status = "SIGKILL" if signal_name else "exit code 137"
        return Failure("killed", f"trainer was killed ({status}){_who_killed(oom_kills)}")
    if nan_evidence is not None:
        return Failure("nan", nan_evidence)
    nan_line = _last_match(own[-EVIDENCE_LINES:], _NAN) if kind == "train" else None
    if nan_line is not None:
        return Failure("nan", nan_line)
    last = _last_meaningful(own)
    how = f"signal {signal_name}" if signal_name else f"exit code {exit_code}"
    return Failure("error", last or f"trainer ended with {how}")


def oom_kills_since(before: int | None) -> int | None:
    """How many processes the kernel's OOM killer ended since ``before`` (None: not known here)."""
    now = platform.oom_kill_count()
    if now is None or before is None:
        return None
    return max(0, now - before)


def _who_killed(oom_kills: int | None) -> str:
    """What the kernel's count of OOM kills says about a SIGKILL: a person's ``kill -9`` is not an OOM."""
    if oom_kills is None:
        return ": by a person or a tool (kill -9), or by the kernel's OOM killer when memory ran out"
    if oom_kills == 0:
        return " from outside (kill -9 or a tool): the kernel's OOM killer ended nothing meanwhile"
    plural = "process" if oom_kills == 1 else "processes"
    return f": the kernel's OOM killer ended {oom_kills} {plural} meanwhile, most likely this one"


RESUME_REFUSED = "resume-refused"
RESUME_UNKNOWN = "resume-unknown"


def resume_refused(last_line: str | None) -> Failure:
    """The trainer refused to resume: its last line says why (``checkpoint is at step 600, not 50``)."""
    return Failure(RESUME_REFUSED, last_line or "the trainer exited before announcing progress")


def resume_unknown(saved_file: str) -> Failure:
    """No checkpoint is known, yet the trainer saved ``saved_file``: a person decides where to resume."""
    return Failure(
        RESUME_UNKNOWN,
        f"{saved_file} exists, but no checkpoint step is known for it: not relaunched from step 0 "
        "over it; start again with startStep (or resume: false to begin anew)",
    )


def last_line(lines: Sequence[str]) -> str | None:
    """The trainer's last meaningful line of ``lines`` (not an ``@arena`` announcement), stripped."""
    return _last_meaningful(lines)


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
