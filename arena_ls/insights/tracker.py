"""Feeds one run's observations from its records, and evaluates its insights.

The observations are one subscriber of the run's one record reader
(``lifecycle.records.RunRecords``, which the run's view owns): from the
log's first record, caught up once when the tracker starts after the view
(a new server rebuilds the same observations as the one that started the
run), then item by item as the view's reader reads them. GPU samples and
the trainer file's modification time are handed in by the caller.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from arena_ls.health.model import Health
from arena_ls.insights.engine import InsightEngine
from arena_ls.insights.model import GpuSample, Insight, Observations
from arena_ls.lifecycle.health_line import HealthPoint
from arena_ls.lifecycle.records import AgentLine, Item, RunRecords
from arena_ls.run.trainer_announcements import Checkpoint, Progress
from arena_ls.settings import InsightSettings


class RunTracker:
    """One run's observations and insights."""

    def __init__(
        self,
        records: RunRecords,
        *,
        created_at: float,
        script: Path | None = None,
        max_vram_mb: int = 5120,
    ) -> None:
        self.records = records
        self.script = script
        self.obs = Observations(launched_at=created_at, max_vram_mb=max_vram_mb)
        self.engine = InsightEngine()
        self.last_sample: object = None
        records.subscribe(self, from_record=0)

    def read_new(self) -> None:
        """Have the run's reader read what is new (it hands this tracker its items)."""
        self.records.read_new()

    def close(self) -> None:
        """Stop following the run's records."""
        self.records.unsubscribe(self)

    def take(self, item: Item) -> None:
        if isinstance(item, AgentLine):
            if item.event.is_launch:
                self.obs.relaunched(item.at)
        elif isinstance(item, HealthPoint):
            self.obs.health.append(item)
        elif isinstance(item.event, Progress):
            self.obs.add_progress(item.event.step, item.event.loss, item.at, item.event.total)
        elif isinstance(item.event, Checkpoint):
            self.obs.add_checkpoint(item.event.step, item.at)
            self.obs.add_checkpoint_path(item.event.path)

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
