"""The kit's save cadence (an arena-ls addition to contract 8.1): ``save(obj, path, step,
every=N)`` and ``due(step, every)``, so a loop that never saved needs one line, no guard."""

from __future__ import annotations

import inspect
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import arena_trainer


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    """Imported by the first test that asks, not while the suite is collected (see test_kit.py)."""
    return pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def fresh_kit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No stop asked, no handlers installed; the process's handlers are given back after."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(arena_trainer, "_stop_reason", None)
    monkeypatch.setattr(arena_trainer, "_handlers_installed", False)
    monkeypatch.setattr(arena_trainer, "_interrupts", 0)
    monkeypatch.delenv("ARENA_STOP_FILE", raising=False)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_the_contracts_save_is_unchanged_and_every_is_an_optional_keyword() -> None:
    parameters = list(inspect.signature(arena_trainer.save).parameters.values())
    assert [p.name for p in parameters] == ["obj", "path", "step", "every"]
    assert parameters[3].default is None


def test_due_every_n_steps_never_at_step_zero(
    torch: ModuleType,
) -> None:
    assert [step for step in range(0, 701) if arena_trainer.due(step, every=200)] == [200, 400, 600]
    assert arena_trainer.due(torch.tensor(400), 200)  # a tensor's step is its .item()


@pytest.mark.parametrize("every", [0, -5, True, 2.5, "200", None])
def test_an_every_that_is_no_whole_number_of_steps_is_refused(every: object) -> None:
    with pytest.raises(ValueError, match="every"):
        arena_trainer.due(10, every)  # type: ignore[arg-type]


def test_save_with_every_writes_and_announces_only_when_due(
    torch: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "ckpt.pt"
    saved = [
        step
        for step in range(0, 450)
        if arena_trainer.save({"step": step}, target, step, every=200) is not None
    ]
    assert saved == [200, 400]
    assert torch.load(target, weights_only=True)["step"] == 400
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all('"event": "checkpoint"' in line for line in lines)
    assert '"step": 400' in lines[1]


@pytest.mark.usefixtures("torch")  # the kit's save needs PyTorch
def test_save_without_every_always_saves(tmp_path: Path) -> None:
    target = tmp_path / "ckpt.pt"
    assert arena_trainer.save({"step": 7}, target, 7) == str(target)
    assert arena_trainer.save({"step": 8}, target, 8, every=None) == str(target)


@pytest.mark.usefixtures("torch")  # the kit's save needs PyTorch
def test_a_bad_every_fails_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every"):
        arena_trainer.save({"step": 1}, tmp_path / "ckpt.pt", 200, every=0)
    assert list(tmp_path.iterdir()) == []


def test_a_stop_file_makes_every_step_due_so_the_stop_is_saved(
    torch: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop = tmp_path / "STOP"
    monkeypatch.setenv("ARENA_STOP_FILE", str(stop))
    target = tmp_path / "ckpt.pt"
    assert arena_trainer.save({"step": 123}, target, 123, every=200) is None
    stop.write_text("")
    assert arena_trainer.save({"step": 124}, target, 124, every=200) == str(target)
    assert torch.load(target, weights_only=True)["step"] == 124
    assert arena_trainer.should_stop() and arena_trainer.stop_reason() == "stop file"


def test_due_installs_no_handler_but_sees_a_signal_once_should_stop_did() -> None:
    before = signal.getsignal(signal.SIGINT)
    assert not arena_trainer.due(7, every=200)
    assert signal.getsignal(signal.SIGINT) is before, "Ctrl-C keeps its meaning"
    assert not arena_trainer.should_stop()  # installs the handlers
    os.kill(os.getpid(), signal.SIGTERM)
    assert arena_trainer.due(7, every=200)
    assert arena_trainer.stop_reason() == "SIGTERM"
