"""Health and pre-flight for one workspace: the sampler, the checks, the device profile.

No LSP here. The hardware comes from the server (``SystemHardware`` unless a
test injects a fake through ``create_server(hardware=...)``); the workspace's
runs, settings and folders come in as plain callables, so this service never
reaches up into the protocol layer nor into the supervisor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arena_ls import platform
from arena_ls.diagnostics import Diag
from arena_ls.health.checkpoint_history import CheckpointHistory
from arena_ls.health.device import describe_device_profile, fp32_only
from arena_ls.health.hardware import Hardware
from arena_ls.health.preflight import CheckpointNeed, check_to_wire, checkpoint_need, run_preflight
from arena_ls.health.sampler import HealthSampler
from arena_ls.health.snapshot import health_to_wire, mark_ours, process_tree_pids
from arena_ls.manifest import Job
from arena_ls.settings import Settings

ON_DEMAND_AGE = 1.0
"""Seconds after which a status request triggers a fresh sample (in the background)."""
FIRST_GPU_READ_AFTER_S = 1.0
"""Seconds before the GPUs are first read unless :meth:`HealthService.read_gpus_now` comes first
(a server calls it once its first status is answered: ``protocol/warmup.py``)."""


class Preflight:
    """The pre-flight checks of a job about to start (the supervisor runs them before a start)."""

    def __init__(
        self,
        hardware: Hardware,
        settings: Callable[[], Settings],
        *,
        root: Path,
        state_dir: Callable[[], Path],
        reboot_pending: Callable[[], str | None] = platform.reboot_pending,
    ) -> None:
        self.hardware = hardware
        self.settings = settings
        self.root = root
        self.state_dir = state_dir
        """The state folder as it is now (settings may move it)."""
        self.reboot_pending = reboot_pending
        """What says the machine waits for a restart (``platform.reboot_pending``; tests fake it)."""
        self.checkpoint_history: Callable[[str], CheckpointHistory | None] | None = None
        """A job's checkpoints as its runs showed them (the supervisor's, set once it exists)."""

    def run(
        self, job: Job, gate_errors: list[Diag], our_pids: set[int]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """(each check in its wire form, warning lines) for ``job``."""
        checks, warnings = run_preflight(
            kind=job.kind,
            hw=self.hardware,
            settings=self.settings().preflight,
            checkpoint_dir=job.resolved_cwd(self.root),
            state_dir=self.state_dir(),
            our_pids=our_pids,
            gate_errors=[f"{d.code} {d.message}" for d in gate_errors] if job.kind == "train" else None,
            reboot_pending=self.reboot_pending,
            checkpoints=self._checkpoint_need(job),
        )
        return [check_to_wire(c) for c in checks], warnings

    def _checkpoint_need(self, job: Job) -> CheckpointNeed | None:
        if job.kind != "train" or self.checkpoint_history is None:
            return None
        return checkpoint_need(self.checkpoint_history(job.id), job.resolved_cwd(self.root))


class HealthService:
    """Samples health in the background; the device profile and a run's GPU use from the samples."""

    def __init__(
        self,
        hardware: Hardware,
        settings: Callable[[], Settings],
        *,
        our_pids: Callable[[], AbstractSet[int]],
        active: Callable[[], bool],
    ) -> None:
        self.hardware = hardware
        self.settings = settings
        self.our_pids = our_pids
        """Every process of the workspace's unfinished runs' trainers (they are "ours" on the GPU)."""
        self.active = active
        """Whether a run is active (the sampler samples faster then)."""
        self.sampler = HealthSampler(hardware, self._our_pids, first_gpu_read_after_s=FIRST_GPU_READ_AFTER_S)
        self._refreshing = threading.Event()

    def _our_pids(self) -> set[int]:
        return set(self.our_pids())

    def wire(self) -> dict[str, Any]:
        """The latest sample, at once; a sample older than a second is refreshed in the background."""
        self.sampler.set_active(self.active())
        latest = self.sampler.latest()
        age = (datetime.now(timezone.utc) - latest.at).total_seconds()
        if age > ON_DEMAND_AGE and not self._refreshing.is_set():
            self._refreshing.set()
            threading.Thread(target=self._refresh_in_background, daemon=True).start()
        if not any(gpu.processes for gpu in latest.gpus):
            # Nothing to mark as ours: the walk of the trainers' process trees (psutil reads
            # every process's /proc entry) is skipped; it cost 3-4 ms of each status.
            return health_to_wire(latest)
        return health_to_wire(mark_ours(latest, self._our_pids()))

    def _refresh_in_background(self) -> None:
        try:
            self.sampler.refresh()
        finally:
            self._refreshing.clear()

    def fp32_only(self) -> bool | None:
        return fp32_only(self.settings().device_fp32_only, self.sampler.latest().gpus)

    def read_gpus_now(self) -> None:
        """Read the GPUs now if they were never read (NVML starts on the sampler's thread); until
        then the device profile is unknown, and the gates' lints wait for it."""
        self.sampler.read_gpus_now()

    def profile_known(self, timeout_s: float | None = 0.0) -> bool:
        """Whether the device profile is known (the GPUs read once), waiting up to ``timeout_s``."""
        return self.sampler.wait_full_sample(timeout_s)

    def device_profile(self) -> str:
        health = self.sampler.latest()
        return describe_device_profile(self.settings().device_fp32_only, health.gpus, health.gpu_error)

    def gpu_use(self, pid: int) -> tuple[int, float] | None:
        """(MB of GPU memory, utilization %) of a trainer's process tree; None without a GPU use."""
        health = self.sampler.latest()
        if not health.gpus:
            return None
        pids = process_tree_pids([pid])
        memory = 0
        utilization: float | None = None
        for gpu in health.gpus:
            mine = [p for p in gpu.processes if p.pid in pids]
            if mine:
                memory += sum(p.used_memory_mb or 0 for p in mine)
                utilization = max(utilization or 0.0, float(gpu.utilization or 0))
        if utilization is None:
            return None
        return memory, utilization

    def close(self) -> None:
        self.sampler.close()
