"""Each insight rule alone, pure: observations in, message or None out."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from arena_ls.insights import INSIGHTS, InsightEngine, Observations
from arena_ls.insights.model import GpuSample, HealthPoint
from arena_ls.insights.parse import health_in_chunk, parse_health
from arena_ls.insights.rules import (
    checkpoint_overdue,
    edited_during_run,
    gpu_bubble,
    grad_health,
    loss_spike,
    thermal,
    vram_spill,
)
from arena_ls.insights.rules.base import SECTIONS
from arena_ls.settings import InsightSettings, parse_settings

DEFAULTS = InsightSettings()
REFERENCE_RUN = Path(__file__).parent / "fixtures" / "reference_run.log"
"""The ``@arena`` lines of a real 600-step run of training/train.py (CPU, seed 1337)."""


def noisy_losses(count: int, start: float = 3.0) -> list[float]:
    """A falling loss with deterministic noise of about +-2%."""
    return [start * (0.999**i) * (1 + 0.02 * ((i * 7919) % 11 - 5) / 5) for i in range(count)]


def with_losses(losses: list[float], *, t0: float = 1000.0, dt: float = 1.0) -> Observations:
    obs = Observations(launched_at=t0)
    for index, loss in enumerate(losses):
        obs.add_progress(index + 1, loss, t0 + dt * index)
    return obs


# -- loss-spike ------------------------------------------------------------------------------


def test_a_spike_fires_then_clears_after_it_is_held() -> None:
    losses = noisy_losses(40)
    losses[30] = losses[29] * 3
    obs = with_losses(losses[:31])
    message = loss_spike.check(obs, DEFAULTS, now=1030.0)
    assert message is not None and "step 31" in message
    obs = with_losses(losses)  # 9 points back in range after it
    assert loss_spike.check(obs, DEFAULTS, now=1039.0) is not None  # still within the hold time
    assert loss_spike.check(obs, DEFAULTS, now=1030.0 + DEFAULTS.loss_spike_hold_seconds + 1) is None


def test_a_falling_noisy_loss_never_spikes() -> None:
    obs = with_losses(noisy_losses(400))
    for end in range(1, 401):
        partial = with_losses(noisy_losses(end))
        assert loss_spike.check(partial, DEFAULTS, now=1000.0 + end) is None
    assert obs.losses


def test_a_flat_loss_does_not_spike_on_rounding() -> None:
    losses = [2.0] * 30 + [2.01]
    assert loss_spike.check(with_losses(losses), DEFAULTS, now=1030.0) is None


def test_a_second_spike_inside_the_window_is_still_seen() -> None:
    losses = noisy_losses(60)
    losses[30] = losses[30] * 3
    losses[40] = losses[40] * 3
    obs = with_losses(losses[:41])
    message = loss_spike.check(obs, attrs.evolve(DEFAULTS, loss_spike_hold_seconds=0.5), now=1040.0)
    assert message is not None and "step 41" in message


def test_too_few_points_are_no_baseline() -> None:
    assert loss_spike.check(with_losses([2.0, 2.0, 2.0, 9.0]), DEFAULTS, now=1003.0) is None


def reference_observations() -> list[tuple[str, dict[str, float]]]:
    events = []
    for line in REFERENCE_RUN.read_text().splitlines():
        if line.startswith("@arena "):
            payload = json.loads(line[7:])
            events.append((payload["event"], payload))
    return events


def test_the_reference_trainers_normal_run_shows_no_insight() -> None:
    """Replay the real run point by point, ten seconds a log line, through the whole engine."""
    engine, obs = InsightEngine(), Observations(launched_at=0.0)
    now = 0.0
    seen: set[str] = set()
    steps = 0
    for kind, event in reference_observations():
        now += 10.0
        if kind == "progress":
            obs.add_progress(int(event["step"]), event["loss"], now)
            steps = int(event["step"])
        elif kind == "health":
            point = parse_health("@arena " + json.dumps(event), now)
            assert point is not None
            obs.health.append(point)
        elif kind == "checkpoint":
            obs.add_checkpoint(int(event["step"]), now)
        seen |= {i.kind for i in engine.evaluate(obs, DEFAULTS, now)}
    assert steps == 600 and len(obs.health) >= 50
    assert seen == set()


# -- grad-health -----------------------------------------------------------------------------


def health(clip: float | None = None, ratio: float | None = None, step: int = 1000) -> HealthPoint:
    return HealthPoint(at=0.0, grad_norm=1.0, clip_fraction=clip, grad_param_ratio=ratio, step=step)


def test_a_clip_fraction_of_20_percent_fires_and_clears() -> None:
    obs = Observations()
    obs.health.extend(health(clip=0.2) for _ in range(5))
    message = grad_health.check(obs, DEFAULTS, now=0.0)
    assert message is not None and "20%" in message and "learning rate" in message
    obs.health.extend(health(clip=0.0) for _ in range(10))
    assert grad_health.check(obs, DEFAULTS, now=0.0) is None


def test_a_large_grad_to_param_ratio_fires() -> None:
    obs = Observations()
    obs.health.extend(health(clip=0.0, ratio=0.15) for _ in range(4))
    message = grad_health.check(obs, DEFAULTS, now=0.0)
    assert message is not None and "ratio 0.15" in message


def test_clipping_during_the_warm_up_is_not_judged() -> None:
    obs = Observations()
    obs.health.extend(health(clip=1.0, step=s) for s in range(10, 200, 10))
    assert grad_health.check(obs, DEFAULTS, now=0.0) is None
    assert grad_health.check(obs, attrs.evolve(DEFAULTS, grad_warmup_steps=0), now=0.0) is not None


def test_two_health_lines_are_not_enough() -> None:
    obs = Observations()
    obs.health.extend(health(clip=0.9) for _ in range(2))
    assert grad_health.check(obs, DEFAULTS, now=0.0) is None


# -- gpu-bubble ------------------------------------------------------------------------------


def busy(obs: Observations, utilization: float, start: float, end: float, every: float = 5.0) -> None:
    at = start
    while at <= end:
        obs.gpu.append(GpuSample(at=at, utilization=utilization, memory_mb=2000))
        at += every


def test_an_idle_gpu_after_the_warm_up_is_a_bubble_and_clears_when_busy() -> None:
    obs = Observations(first_progress_at=0.0)
    busy(obs, 30, 0, 400)
    message = gpu_bubble.check(obs, DEFAULTS, now=400.0)
    assert message is not None and "30%" in message and "prefetch" in message
    busy(obs, 97, 405, 700)
    assert gpu_bubble.check(obs, DEFAULTS, now=700.0) is None


def test_no_bubble_during_the_warm_up() -> None:
    obs = Observations(first_progress_at=0.0)
    busy(obs, 5, 0, 100)
    assert gpu_bubble.check(obs, DEFAULTS, now=100.0) is None


def test_no_bubble_before_the_trainer_computes() -> None:
    obs = Observations()
    busy(obs, 5, 0, 400)
    assert gpu_bubble.check(obs, DEFAULTS, now=400.0) is None


def test_brief_dips_are_not_a_bubble() -> None:
    obs = Observations(first_progress_at=0.0)
    busy(obs, 97, 0, 400)
    busy(obs, 10, 402, 440)  # an evaluation pass
    assert gpu_bubble.check(obs, DEFAULTS, now=440.0) is None


# -- vram-spill and thermal -------------------------------------------------------------------


def test_vram_above_the_probe_limit_fires_and_clears() -> None:
    obs = Observations(max_vram_mb=5120)
    obs.gpu.append(GpuSample(at=0.0, utilization=99, memory_mb=5600))
    message = vram_spill.check(obs, DEFAULTS, now=0.0)
    assert message is not None and "5600 MB" in message and "5120 MB" in message
    obs.gpu.append(GpuSample(at=5.0, utilization=99, memory_mb=4000))
    assert vram_spill.check(obs, DEFAULTS, now=5.0) is None


def test_vram_of_a_run_off_the_gpu_is_nothing() -> None:
    obs = Observations()
    assert vram_spill.check(obs, DEFAULTS, now=0.0) is None
    obs.gpu.append(GpuSample(at=0.0, utilization=None, memory_mb=None))
    assert vram_spill.check(obs, DEFAULTS, now=0.0) is None


def test_thermal_uses_the_gpus_slowdown_point_or_the_setting() -> None:
    obs = Observations()
    obs.gpu.append(GpuSample(at=0.0, utilization=99, memory_mb=1, temperature=88, slowdown_temperature=87))
    message = thermal.check(obs, DEFAULTS, now=0.0)
    assert message is not None and "88 °C" in message and "87 °C" in message
    obs.gpu.append(GpuSample(at=1.0, utilization=99, memory_mb=1, temperature=80, slowdown_temperature=87))
    assert thermal.check(obs, DEFAULTS, now=1.0) is None
    assert thermal.check(obs, attrs.evolve(DEFAULTS, thermal_max_celsius=75), now=1.0) is not None
    obs.gpu.append(GpuSample(at=2.0, utilization=99, memory_mb=1, temperature=95))
    assert thermal.check(obs, DEFAULTS, now=2.0) is None  # no threshold known


# -- checkpoint-overdue ----------------------------------------------------------------------


def test_low_ram_fires_below_the_pre_flight_floor_and_clears_above_it() -> None:
    obs = Observations()
    engine = InsightEngine()
    assert engine.evaluate(obs, DEFAULTS, now=1.0) == []  # no health sample yet
    obs.ram_floor_mb, obs.ram_available_mb = 5120, 5120
    assert engine.evaluate(obs, DEFAULTS, now=2.0) == []
    obs.ram_available_mb = 3900
    [insight] = engine.evaluate(obs, DEFAULTS, now=3.0)
    assert insight.kind == "low-ram" and insight.severity == "warning"
    assert "3900 MB" in insight.message and "5120 MB" in insight.message
    obs.ram_available_mb = 6000
    assert engine.evaluate(obs, DEFAULTS, now=4.0) == []


def test_a_trainer_that_stops_checkpointing_is_overdue_until_the_next_one() -> None:
    obs = Observations(launched_at=0.0)
    for step in range(1, 41):
        obs.add_progress(step, 1.0, float(step))
        if step in (5, 10):
            obs.add_checkpoint(step, float(step))
        if step <= 20:
            assert checkpoint_overdue.check(obs, DEFAULTS, now=float(step)) is None
    message = checkpoint_overdue.check(obs, DEFAULTS, now=40.0)
    assert message is not None and "30 steps" in message and "every 5" in message
    obs.add_checkpoint(40, 40.0)
    assert checkpoint_overdue.check(obs, DEFAULTS, now=40.0) is None


def test_one_checkpoint_gives_the_cadence_from_the_launch() -> None:
    obs = Observations(launched_at=0.0, launch_step=100)
    obs.add_progress(101, 1.0, 1.0)
    obs.add_progress(150, 1.0, 2.0)
    obs.add_checkpoint(150, 2.0)
    obs.add_progress(250, 1.0, 3.0)
    assert checkpoint_overdue.check(obs, DEFAULTS, now=3.0) is None
    obs.add_progress(251, 1.0, 4.0)
    assert checkpoint_overdue.check(obs, DEFAULTS, now=4.0) is not None


def test_without_steps_the_cadence_is_in_seconds() -> None:
    obs = Observations(launched_at=0.0, first_progress_at=0.0)
    obs.add_checkpoint(1, 60.0)
    obs.add_checkpoint(2, 120.0)
    obs.step = None
    assert checkpoint_overdue.check(obs, DEFAULTS, now=200.0) is None
    message = checkpoint_overdue.check(obs, DEFAULTS, now=241.0)
    assert message is not None and "every 60 s" in message


def test_a_save_announced_twice_is_one_checkpoint_and_not_overdue() -> None:
    """The reference trainer's first save: ``saved checkpoint step=20`` (read by the built-in
    pattern), then its ``@arena`` line 4 ms later. Seen in CI as checkpoint-overdue "0 s after the
    last one (they came every 0 s)" for the two seconds until the next save."""
    obs = Observations(launched_at=0.0)
    for step in range(5, 21, 5):
        obs.add_progress(step, 1.0, float(step))
    obs.add_checkpoint(20, 20.000)
    obs.add_checkpoint(20, 20.004)
    assert [m.step for m in obs.checkpoints] == [20]
    for now in (20.1, 21.0, 25.0, 30.0):
        assert checkpoint_overdue.check(obs, DEFAULTS, now=now) is None
    obs.add_progress(25, 1.0, 25.0)
    assert checkpoint_overdue.check(obs, DEFAULTS, now=25.0) is None


def test_no_checkpoint_yet_is_not_overdue() -> None:
    obs = with_losses(noisy_losses(100))
    assert checkpoint_overdue.check(obs, DEFAULTS, now=2000.0) is None


# -- edited-during-run -----------------------------------------------------------------------


def test_an_edit_after_the_launch_holds_until_the_next_launch() -> None:
    obs = Observations(launched_at=100.0, trainer_modified_at=50.0)
    assert edited_during_run.check(obs, DEFAULTS, now=200.0) is None
    obs.trainer_modified_at = 150.0
    message = edited_during_run.check(obs, DEFAULTS, now=200.0)
    assert message is not None and "next launch" in message
    obs.relaunched(160.0)
    assert edited_during_run.check(obs, DEFAULTS, now=200.0) is None


# -- the engine and the registry -------------------------------------------------------------


def test_since_is_kept_while_it_holds_and_reset_after_it_cleared() -> None:
    engine = InsightEngine()
    obs = Observations(max_vram_mb=100)
    obs.gpu.append(GpuSample(at=0.0, utilization=99, memory_mb=200))
    first = engine.evaluate(obs, DEFAULTS, now=10.0)
    assert [(i.kind, i.since) for i in first] == [("vram-spill", 10.0)]
    assert [i.kind for i in engine.take_new()] == ["vram-spill"]
    assert engine.evaluate(obs, DEFAULTS, now=20.0)[0].since == 10.0
    obs.gpu.append(GpuSample(at=21.0, utilization=99, memory_mb=50))
    assert engine.evaluate(obs, DEFAULTS, now=21.0) == []
    obs.gpu.append(GpuSample(at=22.0, utilization=99, memory_mb=300))
    again = engine.evaluate(obs, DEFAULTS, now=30.0)
    assert again[0].since == 30.0 and again[0].to_wire()["since"].startswith("1970-01-01T00:00:30")
    assert engine.take_new() == []  # announced once per run


def test_disabled_insights_hold_nothing() -> None:
    obs = Observations(max_vram_mb=100)
    obs.gpu.append(GpuSample(at=0.0, utilization=99, memory_mb=200))
    assert InsightEngine().evaluate(obs, attrs.evolve(DEFAULTS, enabled=False), now=1.0) == []


def test_the_registry_has_the_contracts_kinds_each_documented() -> None:
    assert list(INSIGHTS) == [
        "loss-spike", "grad-health", "gpu-bubble", "vram-spill",
        "checkpoint-overdue", "thermal", "edited-during-run", "low-ram", "disk-runway",
    ]  # fmt: skip
    for rule in INSIGHTS.values():
        assert set(rule.doc.sections) == set(SECTIONS) and rule.doc.summary.startswith(rule.kind)
        assert rule.severity == ("info" if rule.kind == "edited-during-run" else "warning")


# -- the health line and the settings ---------------------------------------------------------


def test_health_lines_parse_and_bad_ones_are_ignored() -> None:
    line = (
        '@arena {"event": "health", "step": 30, "gradNorm": 1.5, "clipFraction": 0.2, "gradParamRatio": 0.01}'
    )
    point = parse_health(line, 5.0)
    assert point == HealthPoint(at=5.0, grad_norm=1.5, clip_fraction=0.2, grad_param_ratio=0.01, step=30)
    for bad in (
        '@arena {"event": "health"}',
        '@arena {"event": "health", "gradNorm": "x"}',
        "@arena [1]",
        "@arena {",
        'health {"gradNorm": 1}',
        '@arena {"event": "progress", "step": 1}',
    ):
        assert parse_health(bad, 0.0) is None
    chunk = f"step 1\n{line}\n@arena {{\nplain\n".encode()
    assert [p.step for p in health_in_chunk(chunk, 1.0)] == [30]
    assert list(health_in_chunk(b"nothing here\n", 1.0)) == []


def test_insight_settings_parse_with_defaults_and_problems() -> None:
    settings, problems = parse_settings(
        {
            "insights": {"lossSpikeMads": 5, "gradClipFraction": 2, "thermalMaxCelsius": 80},
            "probe": {"allowWithoutGpu": True},
        }
    )
    assert settings.insights.loss_spike_mads == 5.0 and settings.insights.thermal_max_celsius == 80
    assert settings.insights.grad_clip_fraction == 0.05 and settings.probe.allow_without_gpu is True
    assert problems == ["arena.insights.gradClipFraction must be a number from 0 to 1; using the default"]


@pytest.mark.parametrize("kind", list(INSIGHTS))
def test_every_rule_is_quiet_on_no_observations(kind: str) -> None:
    assert INSIGHTS[kind].check(Observations(), DEFAULTS, 0.0) is None


def test_a_launch_resumed_from_an_earlier_run_counts_its_cadence_from_its_first_step() -> None:
    obs = Observations(launched_at=0.0)
    obs.add_progress(510, 1.0, 1.0)  # resumed from step 500 of an earlier run
    obs.add_checkpoint(600, 2.0)
    obs.add_progress(780, 1.0, 3.0)
    assert checkpoint_overdue.check(obs, DEFAULTS, now=3.0) is None
    obs.add_progress(790, 1.0, 4.0)
    message = checkpoint_overdue.check(obs, DEFAULTS, now=4.0)
    assert message is not None and "every 91" in message


def test_a_gpu_sample_is_that_of_the_runs_own_processes() -> None:
    from datetime import datetime, timezone

    from arena_ls.health.model import CpuInfo, Gpu, GpuProcess, Health, RamInfo
    from arena_ls.insights.tracker import gpu_sample

    def gpu(index: int, util: int, temp: int, procs: tuple[GpuProcess, ...]) -> Gpu:
        return Gpu(index, "g", util, 0, 6144, temp, (6, 1), procs, slowdown_temperature=85)

    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    health = Health(at, RamInfo(1, 1, 0.0), CpuInfo(0.0, 1), None, (
        gpu(0, 90, 70, (GpuProcess(10, 1000), GpuProcess(99, 4000))),
        gpu(1, 40, 80, (GpuProcess(11, 500),)),
        gpu(2, 5, 95, (GpuProcess(98, 100),)),
    ), None)  # fmt: skip
    sample = gpu_sample(health, {10, 11})
    assert (sample.memory_mb, sample.utilization, sample.temperature) == (1500, 90.0, 80)
    assert sample.slowdown_temperature == 85 and sample.at == at.timestamp()
    off = gpu_sample(health, {12345})
    assert (off.memory_mb, off.utilization, off.temperature) == (None, None, None)
