"""``disk-runway`` alone, pure (observations in, message or None out), and the disk reading beneath it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from arena_ls.insights import Observations
from arena_ls.insights.disk import MAX_ENTRIES, path_bytes, read_run_disks
from arena_ls.insights.model import DiskSample
from arena_ls.insights.rules.disk_runway import check, duration, growth_rate
from arena_ls.settings import InsightSettings

DEFAULTS = InsightSettings()
MB = 1024 * 1024


def running(*, total: int | None = 10_000, steps: int = 100, seconds: float = 100.0) -> Observations:
    """A launch that made ``steps`` steps in ``seconds`` (1 step a second by default) of ``total``."""
    obs = Observations(launched_at=0.0)
    obs.add_progress(1, 2.0, 0.0, total)
    obs.add_progress(1 + steps, 1.0, seconds, total)
    return obs


def disk(
    obs: Observations, *, used: tuple[int, int], free: int, span: float = 60.0, label: str = "x"
) -> None:
    obs.add_disk_sample("7", label, DiskSample(0.0, used[0], free))
    obs.add_disk_sample("7", label, DiskSample(span, used[1], free))


def test_a_disk_that_fills_before_the_last_step_is_said_with_both_times() -> None:
    obs = running()  # 9,899 steps to go at 1 a second: 2.7 h
    disk(obs, used=(0, 60 * MB), free=600 * MB, label="the checkpoints in /data/ckpt and the run's log")
    message = check(obs, DEFAULTS, 100.0)
    assert message == (
        "at the rate the checkpoints in /data/ckpt and the run's log grow (60.0 MB/min), their disk "
        "(600 MB free) fills in about 10 min, before the run's last step (step 10000, in about 2.7 h): "
        "free space, keep fewer checkpoints, or save to another disk"
    )


def test_a_disk_that_lasts_past_the_last_step_says_nothing() -> None:
    obs = running(total=200)  # 99 steps to go: 99 s; the disk lasts 600 s
    disk(obs, used=(0, 60 * MB), free=600 * MB)
    assert check(obs, DEFAULTS, 100.0) is None


def test_use_that_does_not_grow_says_nothing() -> None:
    obs = running()
    disk(obs, used=(500 * MB, 500 * MB), free=1 * MB)  # one checkpoint file saved over and over
    assert check(obs, DEFAULTS, 100.0) is None
    obs = running()
    disk(obs, used=(500 * MB, 400 * MB), free=1 * MB)  # old checkpoints deleted
    assert check(obs, DEFAULTS, 100.0) is None


def test_readings_too_close_together_say_nothing() -> None:
    obs = running()
    disk(obs, used=(0, 60 * MB), free=1 * MB, span=9.0)
    assert check(obs, DEFAULTS, 100.0) is None
    assert growth_rate(obs.disks["7"]) is None


@pytest.mark.parametrize(
    "obs",
    [running(total=None), running(total=101), Observations(launched_at=0.0)],
    ids=["no total", "at the last step", "no progress"],
)
def test_without_a_known_end_nothing_is_said(obs: Observations) -> None:
    disk(obs, used=(0, 60 * MB), free=1 * MB)
    assert check(obs, DEFAULTS, 100.0) is None


def test_the_fullest_disk_is_named() -> None:
    obs = running()
    obs.add_disk_sample("1", "the run's log", DiskSample(0.0, 0, 100 * MB))
    obs.add_disk_sample("1", "the run's log", DiskSample(60.0, 1 * MB, 100 * MB))
    disk(obs, used=(0, 60 * MB), free=300 * MB, label="the checkpoints in /d")
    message = check(obs, DEFAULTS, 100.0) or ""
    assert message.startswith("at the rate the checkpoints in /d grow") and "about 5 min" in message


def test_the_pace_is_the_current_launch_s() -> None:
    obs = running()
    obs.relaunched(200.0)
    assert obs.seconds_to_last_step() is None  # the new launch has no pace yet
    obs.add_progress(50, 1.0, 210.0, 10_000)
    obs.add_progress(60, 1.0, 220.0, 10_000)
    assert obs.seconds_to_last_step() == 9_940.0


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(45, "45s"), (89, "89s"), (600, "10 min"), (9000, "2.5 h"), (3 * 86400, "3.0 days")],
)
def test_durations_read_as_a_person_says_them(seconds: float, words: str) -> None:
    assert duration(seconds) == words


def test_a_run_s_disks_are_its_checkpoints_that_exist_and_its_log(tmp_path: Path) -> None:
    ckpts, run = tmp_path / "ckpts", tmp_path / "run"
    ckpts.mkdir()
    run.mkdir()
    (ckpts / "a.pt").write_bytes(b"x" * 1000)
    hf = ckpts / "checkpoint-20"
    (hf / "nested").mkdir(parents=True)
    (hf / "model.safetensors").write_bytes(b"x" * 300)
    (hf / "nested" / "optimizer.pt").write_bytes(b"x" * 200)
    (run / "output.log").write_bytes(b"x" * 50)
    paths = ["ckpts/a.pt", str(hf), "ckpts/deleted.pt"]
    readings = read_run_disks(tmp_path, paths, run, lambda path: 12, 5.0)
    assert len(readings) == 1  # one device here
    (reading,) = readings
    assert reading.device == str(os.stat(tmp_path).st_dev)
    assert reading.sample == DiskSample(5.0, 1550, 12 * MB)
    assert reading.label == f"the checkpoints in {ckpts} and the run's log"


def test_a_disk_whose_free_space_cannot_be_read_is_left_out(tmp_path: Path) -> None:
    def unreadable(path: Path) -> int:
        raise PermissionError(13, "denied")

    assert read_run_disks(tmp_path, [], tmp_path, unreadable, 0.0) == []


def test_a_huge_folder_is_walked_only_so_far(tmp_path: Path) -> None:
    for index in range(30):
        (tmp_path / f"f{index}").write_bytes(b"x")
    budget = [10]
    assert path_bytes(tmp_path, budget) < 30 and budget[0] <= 0
    assert path_bytes(tmp_path, [MAX_ENTRIES]) == 30
    assert path_bytes(tmp_path / "missing", [MAX_ENTRIES]) == 0
