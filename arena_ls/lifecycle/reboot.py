"""A restart of the machine under a run (contract 8.3), and what follows it.

At launch the server records the machine's boot in the run's spec (``BootRecord``). When a
run's agent and trainer are gone and its state recorded no end, a server asks
``restart_evidence``: the machine booted again since the launch when the kernel's boot id
changed (Linux), or, where the system has no such id (Windows, macOS), when the boot time
moved past the recorded one by more than ``BOOT_TOLERANCE`` (the boot time is computed
from the system clock: NTP and clock steps move it by seconds, a restart by the run's
whole uptime). Such a run ends ``crashed`` with ``failure.kind`` ``machine-restarted``
instead of ``lost``.

``watchdog.afterReboot`` then decides (``AfterReboot``): ``ask`` (every client offers
"Resume from step N"), ``resume`` (the first server after the restart resumes it once) or
``never``. "Once" is two files in the run's folder: the claim ``.after-reboot.claim``
(created with ``O_EXCL``: of two servers only one gets it; kept for good once a resume was
launched, so neither a second server nor a restarted one resumes the run again) and
``after-reboot.json`` (written atomically), which says which run resumed it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from arena_ls.health.model import BootIdentity
from arena_ls.lifecycle.atomicfile import write_json_atomic
from arena_ls.lifecycle.rundir import BootRecord, RunDir, RunSpec, RunState
from arena_ls.lifecycle.runview import MACHINE_RESTARTED

log = logging.getLogger(__name__)

BOOT_TOLERANCE = 60.0
"""Seconds the boot time may move without a restart (clock steps, NTP, Windows' smoothing)."""
AFTER_REBOOT_CLAIM = "after-reboot"
"""``RunDir.claim_once`` name of the one automatic resume of a run interrupted by a restart."""
RESUMED_FILE = "after-reboot.json"
AFTER_REBOOT_CHOICES = ("ask", "resume", "never")

BootReader = Callable[[], BootIdentity]


def boot_record(boot: BootIdentity) -> BootRecord:
    """What the run's spec keeps of the boot it was launched in."""
    return BootRecord(boot_id=boot.boot_id, boot_time=boot.boot_time)


def restart_evidence(spec: RunSpec, now: BootIdentity) -> str | None:
    """Why the machine has restarted since ``spec``'s launch, or None when it has not (or
    nothing tells: a run recorded before boots were, a boot that cannot be read)."""
    recorded = spec.boot
    if recorded is None:
        return None
    if recorded.boot_id is not None and now.boot_id is not None:
        if recorded.boot_id == now.boot_id:
            return None
        return (
            f"the machine restarted since the run started (boot id {recorded.boot_id} is now {now.boot_id})"
        )
    if recorded.boot_time is None or now.boot_time is None:
        return None
    later = now.boot_time - recorded.boot_time
    if later <= BOOT_TOLERANCE or now.boot_time <= spec.created_at:
        return None
    return (
        f"the machine restarted since the run started (it booted at {_clock(now.boot_time)}, "
        f"the run started at {_clock(spec.created_at)})"
    )


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


@attrs.frozen
class AfterReboot:
    """What a run interrupted by a restart offers (``RunInfo.afterReboot``)."""

    policy: str
    """``watchdog.afterReboot`` as it is now: ``ask``, ``resume`` or ``never``."""
    step: int | None
    """The job's last checkpoint's step the resume would start from (None: nothing to resume);
    once a resume happened, the step it started from."""
    resumed_by: str | None
    """The run that resumed it, once one did (the offer is then gone)."""
    newer_run: str | None = None
    """A later run of the same job, started since (by a person): the offer is gone too."""
    problem: str | None = None
    """Why the automatic resume did not happen (a failed pre-flight...), for the clients."""
    path: str | None = None
    """The path of the checkpoint the resume would start from, when the job's ``resume.args``
    name ``{path}`` (contract 8.1: the clients name it beside the step); else None."""

    @property
    def offer(self) -> str | None:
        """``Resume from step N`` while the run may be resumed and a person should be asked."""
        if self.resumed_by or self.newer_run or self.step is None or self.policy == "never":
            return None
        return f"Resume from step {self.step}"

    def to_wire(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "step": self.step,
            "offer": self.offer,
            "resumedBy": self.resumed_by,
            "newerRun": self.newer_run,
            "problem": self.problem,
            "path": self.path,
        }


def interrupted_by_restart(state: RunState | None) -> bool:
    """The run ended ``machine-restarted``."""
    return state is not None and state.failure is not None and state.failure.kind == MACHINE_RESTARTED


def read_resumed(run_dir: RunDir) -> dict[str, Any] | None:
    """``after-reboot.json``: which run resumed this one, or what stopped its resume; None when absent."""
    try:
        data = json.loads((run_dir.path / RESUMED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def record_resumed(
    run_dir: RunDir, resumed_by: str | None, problem: str | None = None, step: int | None = None
) -> None:
    """Write ``after-reboot.json`` atomically (a failed write is logged: the claim still holds).
    ``step`` is the step the resume started from: once resumed, the offer's step stays that one
    (the job's last checkpoint moves on as the resumed run saves)."""
    payload = {"resumedBy": resumed_by, "problem": problem, "step": step, "at": time.time()}
    try:
        write_json_atomic(run_dir.path / RESUMED_FILE, payload)
    except OSError as error:
        log.warning("run %s: could not record its resume after the restart: %s", run_dir.run_id, error)


def after_reboot(run_dir: RunDir, policy: str, step: int | None, newer_run: str | None) -> AfterReboot:
    """The offer of an interrupted run, as its folder says now. While a server's own resume is
    under way (claimed, not recorded yet) the run it is starting is not taken for a person's
    ``newer_run``: the resume's outcome is said by ``after-reboot.json`` once written."""
    record = read_resumed(run_dir)
    if record is None and (run_dir.path / f".{AFTER_REBOOT_CLAIM}.claim").exists():
        newer_run = None
    record = record or {}
    resumed_by = record.get("resumedBy")
    problem = record.get("problem")
    resumed_at = record.get("step")
    if isinstance(resumed_by, str) and isinstance(resumed_at, int) and not isinstance(resumed_at, bool):
        step = resumed_at  # where the resume started, not where the resumed run has got to since
    return AfterReboot(
        policy=policy,
        step=step,
        resumed_by=resumed_by if isinstance(resumed_by, str) else None,
        newer_run=newer_run,
        problem=problem if isinstance(problem, str) else None,
    )
