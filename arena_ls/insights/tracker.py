"""Feeds one run's observations from its folder on disk, and evaluates its insights.

The run's captured output is read from the start, incrementally (each call
reads only records it has not seen), so a new server rebuilds the same
observations as the one that started the run. GPU samples and the trainer
file's modification time are handed in by the caller.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from arena_ls.health.model import Health
from arena_ls.insights.engine import InsightEngine
from arena_ls.insights.model import GpuSample, Insight, Observations
from arena_ls.insights.parse import health_in_chunk
from arena_ls.lifecycle.capture import iter_records
from arena_ls.lifecycle.events import Checkpoint, EventParser, Progress
from arena_ls.lifecycle.supervisor_events import parse_bytes
from arena_ls.settings import InsightSettings

ARENA_STREAM = 2
MAX_RECORDS_PER_READ = 20_000
MAX_BYTES_PER_READ = 16 << 20
READ_BUDGET_SECONDS = 0.004
"""CPU one tick spends reading a run's new records at most (it runs on the event loop, which is
never held over 5 ms while a run streams, issue 24): a backlog is caught up over several ticks."""
FULL_PARSE_BYTES = 256 << 10
"""Bound one read, so that a flood's backlog is caught up over several ticks."""


class RunTracker:
    """One run's observations and insights."""

    def __init__(
        self,
        run_dir: Path,
        parser: EventParser,
        *,
        created_at: float,
        script: Path | None = None,
        max_vram_mb: int = 5120,
    ) -> None:
        self.run_dir = run_dir
        self.parser = parser
        self.script = script
        self.next_record = 0
        self.obs = Observations(launched_at=created_at, max_vram_mb=max_vram_mb)
        self.engine = InsightEngine()
        self.last_sample: object = None

    def read_new(self, limit: int = MAX_RECORDS_PER_READ, max_bytes: int = MAX_BYTES_PER_READ) -> None:
        """Feed the records written since the last call (at most ``limit`` records, about ``max_bytes``)."""
        read = 0
        deadline = time.thread_time() + READ_BUDGET_SECONDS
        for count, (index, stream, _, data, at) in enumerate(iter_records(self.run_dir, self.next_record)):
            self.next_record = index + 1
            read += len(data)
            if stream == ARENA_STREAM:
                if any(parse_bytes(raw).is_launch for raw in data.splitlines()):
                    self.obs.relaunched(at)
            else:
                self._scan(data, at)
            if count + 1 >= limit or read >= max_bytes or time.thread_time() > deadline:
                return

    def _scan(self, data: bytes, at: float) -> None:
        # A flood's chunk (over 256 KiB): every announcement, but progress only from its
        # last 256 KiB, as the agent does; ordinary chunks are parsed line by line.
        for event in self.parser.parse_flood(data, tail_bytes=FULL_PARSE_BYTES):
            if isinstance(event, Progress):
                self.obs.add_progress(event.step, event.loss, at)
            elif isinstance(event, Checkpoint):
                self.obs.add_checkpoint(event.step, at)
        self.obs.health.extend(health_in_chunk(data, at))

    def is_new_sample(self, health: Health) -> bool:
        return health.at != self.last_sample

    def add_health_sample(self, health: Health, pids: set[int]) -> None:
        """The GPU as the run's own processes see it, once per health sample."""
        if not self.is_new_sample(health):
            return
        self.last_sample = health.at
        self.obs.gpu.append(gpu_sample(health, pids))
        self.obs.ram_available_mb = health.ram.available_mb

    def note_trainer_file(self) -> None:
        if self.script is None:
            return
        try:
            self.obs.trainer_modified_at = os.stat(self.script).st_mtime
        except OSError:
            self.obs.trainer_modified_at = None

    def evaluate(self, settings: InsightSettings, now: float | None = None) -> list[Insight]:
        return self.engine.evaluate(self.obs, settings, time.time() if now is None else now)


def gpu_sample(health: Health, pids: set[int]) -> GpuSample:
    """Utilisation, temperatures (the hottest GPU) and memory of the GPUs ``pids`` are on."""
    at = health.at.timestamp()
    memory = 0
    utilization: float | None = None
    temperature: int | None = None
    slowdown: int | None = None
    on_gpu = False
    for gpu in health.gpus:
        mine = [p for p in gpu.processes if p.pid in pids]
        if not mine:
            continue
        on_gpu = True
        memory += sum(p.used_memory_mb or 0 for p in mine)
        if gpu.utilization is not None:
            utilization = max(utilization or 0.0, float(gpu.utilization))
        if gpu.temperature is not None and (temperature is None or gpu.temperature > temperature):
            temperature, slowdown = gpu.temperature, gpu.slowdown_temperature
    if not on_gpu:
        return GpuSample(at=at, utilization=None, memory_mb=None)
    return GpuSample(at, utilization, memory, temperature, slowdown)
