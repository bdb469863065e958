"""The pre-flight's disk check counts what the job's checkpoints will still take (contract 8.2).

Pure: the job's history and a fake disk in, the check out; real files give the checkpoints' sizes.
"""

from __future__ import annotations

from pathlib import Path

import attrs

from arena_ls.health.checkpoint_history import CheckpointHistory
from arena_ls.health.preflight import CheckpointNeed, check_disk, checkpoint_need, run_preflight
from arena_ls.settings import PreflightSettings

from .support import FakeHardware

MB = 1024 * 1024
FLOOR = attrs.evolve(PreflightSettings(), min_free_disk_mb=100)


def saved(folder: Path, *steps: int, size: int = 4 * MB) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for step in steps:
        (folder / f"ckpt-{step}.pt").write_bytes(b"\0" * size)
        paths.append(f"ckpts/ckpt-{step}.pt")
    return paths


def test_a_trainer_that_keeps_every_checkpoint_needs_one_per_save_left(tmp_path: Path) -> None:
    paths = saved(tmp_path / "ckpts", 10, 20, 30, 40)
    need = checkpoint_need(CheckpointHistory(tuple(paths), 40, 1000), tmp_path)
    assert need == CheckpointNeed(tmp_path / "ckpts", 4 * MB, 96, True, 40, 1000)  # 960 steps, a save each 10
    assert need.need_mb == 384
    assert need.describe() == (
        "the job's checkpoints need 384 MB more: 96 saves of 4 MB left (step 40 of 1000; "
        "it keeps every checkpoint it saves)"
    )


def test_a_trainer_that_saves_over_one_file_needs_one_save(tmp_path: Path) -> None:
    paths = saved(tmp_path / "ckpts", 40)
    need = checkpoint_need(CheckpointHistory(("ckpts/ckpt-40.pt",), 40, 1000), tmp_path)
    assert need is not None and not need.accumulate and need.need_mb == 4 and paths
    assert "room for one more save of 4 MB" in need.describe()


def test_a_trainer_that_deletes_old_checkpoints_needs_one_save(tmp_path: Path) -> None:
    paths = saved(tmp_path / "ckpts", 10, 20, 30, 40)
    (tmp_path / paths[0]).unlink()
    need = checkpoint_need(CheckpointHistory(tuple(paths), 40, 1000), tmp_path)
    assert need is not None and not need.accumulate and need.need_mb == 4


def test_a_checkpoint_folder_counts_its_files(tmp_path: Path) -> None:
    folder = tmp_path / "out" / "checkpoint-20"
    (folder / "inner").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"\0" * (2 * MB))
    (folder / "inner" / "optimizer.pt").write_bytes(b"\0" * (2 * MB))
    need = checkpoint_need(CheckpointHistory((str(folder),), 20, 100), tmp_path)
    assert need is not None and need.save_bytes == 4 * MB and need.folder == tmp_path / "out"


def test_nothing_is_counted_when_it_cannot_be_known(tmp_path: Path) -> None:
    paths = tuple(saved(tmp_path / "ckpts", 10, 20))
    assert checkpoint_need(None, tmp_path) is None
    assert checkpoint_need(CheckpointHistory(paths, 20, None), tmp_path) is None  # no last step
    assert checkpoint_need(CheckpointHistory(paths, 20, 20), tmp_path) is None  # at its end
    assert checkpoint_need(CheckpointHistory(("gone.pt",), 20, 100), tmp_path) is None
    assert checkpoint_need(CheckpointHistory((), 20, 100), tmp_path) is None


def test_the_disk_check_fails_when_the_checkpoints_left_do_not_fit(tmp_path: Path) -> None:
    need = CheckpointNeed(tmp_path / "ckpts", 4 * MB, 96, True, 40, 1000)
    check = check_disk(FakeHardware(disk_free=400), FLOOR, tmp_path, None, need)
    assert not check.ok
    assert check.message.startswith(f"only 400 MB free at {tmp_path / 'ckpts'}, need 484 MB: ")
    assert (
        "96 saves of 4 MB left (step 40 of 1000" in check.message and "plus the 100 MB floor" in check.message
    )
    assert "keep fewer checkpoints" in check.message


def test_the_disk_check_passes_when_they_fit_and_says_what_it_counted(tmp_path: Path) -> None:
    need = CheckpointNeed(tmp_path / "ckpts", 4 * MB, 96, True, 40, 1000)
    check = check_disk(FakeHardware(disk_free=500), FLOOR, tmp_path, tmp_path / "state", need)
    assert check.ok
    assert check.message.startswith(f"500 MB free at {tmp_path / 'ckpts'} (need 484 MB), 500 MB free at")
    assert "(need 100 MB): the job's checkpoints need 384 MB more" in check.message


def test_without_a_history_the_floor_alone_counts(tmp_path: Path) -> None:
    assert check_disk(FakeHardware(disk_free=101), FLOOR, tmp_path).ok
    assert not check_disk(FakeHardware(disk_free=99), FLOOR, tmp_path).ok


def test_the_train_pre_flight_passes_the_need_to_the_disk_check(tmp_path: Path) -> None:
    need = CheckpointNeed(tmp_path / "ckpts", 4 * MB, 96, True, 40, 1000)
    checks, _ = run_preflight(
        kind="train",
        hw=FakeHardware(disk_free=400),
        settings=FLOOR,
        checkpoint_dir=tmp_path,
        state_dir=tmp_path / "state",
        our_pids=set(),
        gate_errors=[],
        checkpoints=need,
    )
    disk = next(check for check in checks if check.name == "disk")
    assert not disk.ok and "need 484 MB" in disk.message
