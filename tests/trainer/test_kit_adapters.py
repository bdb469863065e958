"""The kit's framework adapters in-process, on the frameworks' own objects where they are cheap
(transformers' ``TrainerControl``/``TrainerState``) and on a stand-in strategy for Lightning's save;
the real runs are tests/frameworks/test_frameworks_e2e.py."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

import arena_trainer


@pytest.fixture(scope="module", autouse=True)
def transformers() -> ModuleType:
    """Imported when this module's first test runs, not while the suite is collected: transformers
    and Lightning take seconds to import, which every worker of ``pytest -n`` would pay at
    collection (a module-scoped fixture also keeps this module's tests on one worker)."""
    return pytest.importorskip("transformers")


@pytest.fixture(scope="module", autouse=True)
def lightning_pytorch() -> ModuleType:
    return pytest.importorskip("lightning.pytorch")


@pytest.fixture(autouse=True)
def fresh_kit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    install = signal.signal
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(arena_trainer, "_stop_reason", None)
    monkeypatch.setattr(arena_trainer, "_handlers_installed", False)
    monkeypatch.delenv("ARENA_STOP_FILE", raising=False)
    yield
    for signum, handler in saved.items():
        install(signum, handler)


def events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("@arena ") :]) for line in out.splitlines() if line.startswith("@arena ")]


def test_the_adapters_are_built_once_from_the_frameworks_classes(
    transformers: ModuleType, lightning_pytorch: ModuleType
) -> None:
    assert issubclass(arena_trainer.HFCallback, transformers.TrainerCallback)
    assert arena_trainer.HFCallback is arena_trainer.HFCallback
    assert issubclass(arena_trainer.LightningCallback, lightning_pytorch.Callback)


def hf_state(step: int) -> Any:
    import transformers  # imported by the fixture of the same name before any test runs

    return transformers.TrainerState(global_step=step, max_steps=40, is_world_process_zero=True)


def test_hf_on_log_announces_progress_and_eval(
    transformers: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    callback = arena_trainer.HFCallback()
    control = transformers.TrainerControl()
    callback.on_log(None, hf_state(7), control, logs={"loss": 2.5, "learning_rate": 1e-4, "grad_norm": 0.9})
    callback.on_log(None, hf_state(7), control, logs={"eval_loss": 2.75})
    callback.on_log(None, hf_state(7), control, logs={"train_loss": 2.4, "train_runtime": 3.0})
    assert events(capsys.readouterr().out) == [
        {
            "event": "progress",
            "step": 7,
            "total": 40,
            "loss": 2.5,
            "lr": 1e-4,
            "grad_norm": 0.9,
            "protocol": 1,
        },
        {"event": "eval", "step": 7, "loss": 2.75, "protocol": 1},
    ]


def test_hf_on_log_says_nothing_off_the_main_process(
    transformers: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    state = transformers.TrainerState(global_step=7, max_steps=40, is_world_process_zero=False)
    arena_trainer.HFCallback().on_log(None, state, transformers.TrainerControl(), logs={"loss": 2.5})
    assert capsys.readouterr().out == ""


def test_hf_on_save_announces_the_checkpoint_folder(
    transformers: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "checkpoint-20"
    folder.mkdir()
    (folder / "trainer_state.json").write_text("{}")
    args = SimpleNamespace(output_dir=str(tmp_path))
    arena_trainer.HFCallback().on_save(args, hf_state(20), transformers.TrainerControl())
    (event,) = events(capsys.readouterr().out)
    assert event["path"] == str(folder) and event["step"] == 20
    assert (event["bytes"], event["sha256"]) == arena_trainer.digest(folder)


def test_hf_a_stop_saves_and_ends_training(
    transformers: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_file = tmp_path / "STOP"
    monkeypatch.setenv("ARENA_STOP_FILE", str(stop_file))
    callback = arena_trainer.HFCallback()
    control = transformers.TrainerControl()
    callback.on_step_end(None, hf_state(5), control)
    assert not control.should_save and not control.should_training_stop
    stop_file.touch()
    callback.on_step_end(None, hf_state(6), control)
    assert control.should_save and control.should_training_stop


def test_hf_empties_the_cache_on_its_cadence(
    transformers: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    emptied: list[int] = []
    monkeypatch.setattr(arena_trainer, "empty_cache", lambda step, every: emptied.append(step) or False)
    callback = arena_trainer.HFCallback(empty_cache_every=20)
    for step in (19, 20):
        callback.on_step_end(None, hf_state(step), transformers.TrainerControl())
    assert emptied == [19, 20]  # asked every step; the kit's cadence decides (every 20 here)


class Strategy:
    """What the callback follows of a Lightning strategy: its save, and whether it is rank 0."""

    def __init__(self, is_global_zero: bool) -> None:
        self.is_global_zero = is_global_zero
        self.saved: list[str] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str, storage_options: Any = None) -> None:
        if self.is_global_zero:
            Path(filepath).write_bytes(b"lightning checkpoint")
        self.saved.append(filepath)


def test_lightning_saves_are_announced_once_the_file_exists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    strategy = Strategy(is_global_zero=True)
    arena_trainer._follow_saves(strategy)
    arena_trainer._follow_saves(strategy)  # set up again (a second fit): followed once
    target = tmp_path / "epoch=0-step=10.ckpt"
    strategy.save_checkpoint({"global_step": 10}, str(target))
    assert strategy.saved == [str(target)]
    (event,) = events(capsys.readouterr().out)
    assert event["step"] == 10 and event["path"] == str(target) and event["bytes"] == 20


def test_lightning_other_ranks_announce_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    strategy = Strategy(is_global_zero=False)
    arena_trainer._follow_saves(strategy)
    strategy.save_checkpoint({"global_step": 10}, str(tmp_path / "x.ckpt"))
    assert capsys.readouterr().out == ""


def test_lightning_a_stop_saves_announces_and_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stop_file = tmp_path / "STOP"
    monkeypatch.setenv("ARENA_STOP_FILE", str(stop_file))
    saved: list[str] = []
    trainer = SimpleNamespace(
        global_step=7, max_steps=40, log_every_n_steps=50, is_global_zero=True, should_stop=False,
        optimizers=[], checkpoint_callback=SimpleNamespace(dirpath=str(tmp_path / "ckpts")),
        save_checkpoint=saved.append,
    )  # fmt: skip
    callback = arena_trainer.LightningCallback()
    callback.on_train_batch_end(trainer, None, {"loss": 1.0}, None, 0)
    assert not trainer.should_stop and saved == []
    stop_file.touch()
    callback.on_train_batch_end(trainer, None, {"loss": 1.0}, None, 1)
    assert trainer.should_stop and saved == [str(tmp_path / "ckpts" / "arena-stop-step-7.ckpt")]
    callback.on_train_batch_end(trainer, None, {"loss": 1.0}, None, 2)
    assert len(saved) == 1  # one stop, one save
