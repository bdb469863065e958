"""The reference trainer (training/train.py), run as the job agent runs it: a real subprocess.

Every wait is for a line on the trainer's stdout (or its exit) with a deadline;
nothing sleeps and hopes. A few unit tests load the script in-process to reach
paths a CPU cannot trigger for real (out-of-memory).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.helpers.lazy_import import LazyModule

torch = LazyModule("torch")  # imported by the first test that uses it (tests/helpers/lazy_import.py)

TRAIN_PY = Path(__file__).resolve().parents[2] / "training" / "train.py"
DEADLINE_S = 150.0  # generous: the suite must pass on a loaded 2-core machine
# Small and quick: a step takes a few milliseconds at batch 4.
FAST = ["--batch-size", "4", "--sample-chars", "0", "--seed", "7"]


class Trainer:
    """A running train.py whose stdout lines can be awaited one by one."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("ARENA_")}
        full_env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(TRAIN_PY), *args],
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._pending: queue.Queue[str | None] = queue.Queue()
        self._readers = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout.append(line.rstrip("\n"))
            self._pending.put(line.rstrip("\n"))
        self._pending.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line.rstrip("\n"))

    def wait_for(self, wanted: Callable[[str], bool], what: str) -> str:
        """The next stdout line for which `wanted` is true; fails at EOF or the deadline."""
        while True:
            try:
                line = self._pending.get(timeout=DEADLINE_S)
            except queue.Empty:
                self.kill()
                pytest.fail(f"no {what} within {DEADLINE_S}s\n{self.transcript()}")
            if line is None:
                pytest.fail(f"trainer ended before {what}\n{self.transcript()}")
            if wanted(line):
                return line

    def finish(self) -> int:
        """Wait for the exit and for both streams to be read to the end."""
        try:
            code = self.proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"trainer did not exit within {DEADLINE_S}s\n{self.transcript()}")
        for reader in self._readers:
            reader.join(timeout=DEADLINE_S)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in map(arena_event, self.stdout) if e is not None and e["event"] == kind]

    def transcript(self) -> str:
        return "stdout:\n" + "\n".join(self.stdout) + "\nstderr:\n" + "\n".join(self.stderr)


def arena_event(line: str) -> dict[str, Any] | None:
    if not line.startswith("@arena "):
        return None
    event = json.loads(line[len("@arena ") :])
    assert isinstance(event, dict)
    return event


def is_event(kind: str, step: int | None = None) -> Callable[[str], bool]:
    def wanted(line: str) -> bool:
        event = arena_event(line)
        return event is not None and event["event"] == kind and step in (None, event["step"])

    return wanted


def run_to_end(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Trainer:
    trainer = Trainer(args, cwd, env)
    trainer.finish()
    return trainer


def load_checkpoint(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def progress_losses(trainer: Trainer, after: int) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in trainer.events("progress") if e["step"] > after}


# --------------------------------------------------------------------------- subprocess tests


def test_a_run_announces_progress_and_checkpoints_as_the_contract_says(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    args = [*FAST, "--steps", "25", "--log-every", "10", "--ckpt-every", "10"]
    trainer = run_to_end([*args, "--ckpt-dir", str(ckpt)], tmp_path)

    assert trainer.proc.returncode == 0, trainer.transcript()
    progress = trainer.events("progress")
    assert [e["step"] for e in progress] == [10, 20, 25]  # every --log-every, and the last
    for event in progress:
        assert list(event) == ["event", "step", "total", "loss", "lr"]
        assert event["total"] == 25
        assert isinstance(event["loss"], float) and round(event["loss"], 4) == event["loss"]
        assert isinstance(event["lr"], float) and event["lr"] > 0
    checkpoints = trainer.events("checkpoint")
    assert [e["step"] for e in checkpoints] == [10, 20, 25]  # every --ckpt-every, and the last
    for event in checkpoints:
        assert list(event) == ["event", "step", "path", "bytes", "sha256"]
        assert event["path"] == (ckpt / f"ckpt_{event['step']:08d}.pt").as_posix()
    last = checkpoints[-1]
    saved = (ckpt / "ckpt_00000025.pt").read_bytes()
    assert (last["bytes"], last["sha256"]) == (len(saved), hashlib.sha256(saved).hexdigest())
    assert (ckpt / "ckpt_latest.pt").read_bytes() == saved, "the latest is the last step's file"
    assert load_checkpoint(ckpt / "ckpt_latest.pt")["step"] == 25
    assert (ckpt / "ckpt_best.pt").is_file()
    assert not list(ckpt.glob(".*.tmp")), "no temporary file may survive a save"


def test_default_checkpoint_folder_is_named_after_the_job(tmp_path: Path) -> None:
    trainer = run_to_end([*FAST, "--steps", "3"], tmp_path, {"ARENA_JOB_ID": "my-job"})

    assert trainer.proc.returncode == 0, trainer.transcript()
    assert trainer.events("checkpoint")[-1]["path"] == "checkpoints/my-job/ckpt_00000003.pt"
    assert (tmp_path / "checkpoints" / "my-job" / "ckpt_latest.pt").is_file()


def test_resume_after_sigkill_continues_the_same_loss_curve(tmp_path: Path) -> None:
    # Dropout draws random numbers every step, so this also proves the RNG states
    # travel in the checkpoint; --log-every 1 compares every single step.
    # 120 steps: far more than the trainer can take between its step-20
    # checkpoint line and the kill, however loaded the machine is.
    common = [*FAST, "--steps", "120", "--ckpt-every", "20", "--eval-every", "20"]
    common += ["--log-every", "1", "--dropout", "0.1"]
    uninterrupted = run_to_end([*common, "--ckpt-dir", str(tmp_path / "a")], tmp_path)
    assert uninterrupted.proc.returncode == 0, uninterrupted.transcript()

    crashed = Trainer([*common, "--ckpt-dir", str(tmp_path / "b")], tmp_path)
    crashed.wait_for(is_event("checkpoint", 20), "the checkpoint at step 20")
    crashed.proc.kill()  # SIGKILL: no chance to save anything more
    crashed.finish()
    # Like the watchdog: resume from the last checkpoint the run announced.
    resume_step = crashed.events("checkpoint")[-1]["step"]
    assert 20 <= resume_step < 120

    resumed = run_to_end(
        [*common, "--ckpt-dir", str(tmp_path / "b"), "--resume", "--start-step", str(resume_step)],
        tmp_path,
    )
    assert resumed.proc.returncode == 0, resumed.transcript()
    reference = progress_losses(uninterrupted, after=0)
    assert len(reference) == 120
    assert progress_losses(resumed, after=resume_step) == {
        step: loss for step, loss in reference.items() if step > resume_step
    }
    for step, loss in progress_losses(crashed, after=0).items():  # up to the kill, too
        assert reference[step] == loss, step
    final_a = load_checkpoint(tmp_path / "a" / "ckpt_latest.pt")
    final_b = load_checkpoint(tmp_path / "b" / "ckpt_latest.pt")
    for name, tensor in final_a["model"].items():
        assert torch.equal(tensor, final_b["model"][name]), name


def test_stop_file_saves_announces_and_exits_zero(tmp_path: Path) -> None:
    stop_file = tmp_path / "stop-request"
    ckpt = tmp_path / "ck"
    trainer = Trainer(
        [*FAST, "--steps", "100000", "--log-every", "5", "--ckpt-dir", str(ckpt)],
        tmp_path,
        {"ARENA_STOP_FILE": str(stop_file)},
    )
    trainer.wait_for(is_event("progress"), "a first progress line")
    stop_file.touch()

    assert trainer.finish() == 0, trainer.transcript()
    announced = trainer.events("checkpoint")[-1]
    assert announced["path"] == (ckpt / f"ckpt_{announced['step']:08d}.pt").as_posix()
    assert 5 <= announced["step"] < 100000
    state = load_checkpoint(Path(announced["path"]))
    assert state["step"] == announced["step"]
    assert state["optimizer"]["state"], "the optimizer's moments must be saved"
    assert set(state["model"]) == set(load_checkpoint(ckpt / "ckpt_latest.pt")["model"])
    assert f"stopped by stop file at step {announced['step']}" in trainer.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_is_a_cooperative_stop(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    trainer = Trainer([*FAST, "--steps", "100000", "--log-every", "5", "--ckpt-dir", str(ckpt)], tmp_path)
    trainer.wait_for(is_event("progress"), "a first progress line")
    trainer.proc.send_signal(signal.SIGTERM)

    assert trainer.finish() == 0, trainer.transcript()
    announced = trainer.events("checkpoint")[-1]
    assert load_checkpoint(ckpt / "ckpt_latest.pt")["step"] == announced["step"]
    assert f"stopped by SIGTERM at step {announced['step']}" in trainer.stdout


def test_resume_refuses_a_start_step_the_checkpoint_does_not_have(tmp_path: Path) -> None:
    ckpt = ["--ckpt-dir", str(tmp_path / "ck")]
    first = run_to_end([*FAST, "--steps", "20", "--ckpt-every", "10", *ckpt], tmp_path)
    assert first.proc.returncode == 0, first.transcript()

    # 10 and 20 are kept (a rollback may resume from 10); 15 was never saved
    refused = run_to_end([*FAST, "--steps", "40", *ckpt, "--resume", "--start-step", "15"], tmp_path)

    assert refused.proc.returncode == 2, refused.transcript()
    assert len(refused.stderr) == 1, refused.transcript()
    assert "--start-step 15" in refused.stderr[0] and "step 20" in refused.stderr[0]
    assert not refused.events("progress") and not refused.events("checkpoint")
    assert load_checkpoint(tmp_path / "ck" / "ckpt_latest.pt")["step"] == 20  # untouched


def test_a_rollback_resumes_an_older_kept_checkpoint_and_skips_batches(tmp_path: Path) -> None:
    """Contract 8.2: the last --keep-checkpoints saves stay, so a rollback has somewhere to go;
    --skip-batches moves the data stream on, and the offset is saved for later resumes."""
    ckpt = tmp_path / "ck"
    first = run_to_end([*FAST, "--steps", "40", "--ckpt-every", "10", "--ckpt-dir", str(ckpt)], tmp_path)
    assert first.proc.returncode == 0, first.transcript()
    assert sorted(p.name for p in ckpt.glob("ckpt_0*.pt")) == [
        "ckpt_00000020.pt",
        "ckpt_00000030.pt",
        "ckpt_00000040.pt",
    ], "the newest three are kept"
    back = [*FAST, "--steps", "30", "--ckpt-every", "10", "--ckpt-dir", str(ckpt), "--resume"]
    rolled = run_to_end([*back, "--start-step", "20", "--skip-batches", "200"], tmp_path)
    assert rolled.proc.returncode == 0, rolled.transcript()
    assert f"resumed from {(ckpt / 'ckpt_00000020.pt').as_posix()} at step 20" in rolled.stdout
    assert "skipping 200 batches: the data stream continues 200 batches on" in rolled.stdout
    assert load_checkpoint(ckpt / "ckpt_00000030.pt")["data_offset"] == 200
    plain = run_to_end([*back, "--start-step", "20"], tmp_path)
    assert plain.proc.returncode == 0, plain.transcript()
    assert load_checkpoint(ckpt / "ckpt_00000030.pt")["data_offset"] == 0
    assert rolled.events("progress")[-1]["loss"] != plain.events("progress")[-1]["loss"], "other batches"


def test_resume_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    refused = run_to_end(
        [*FAST, "--steps", "10", "--ckpt-dir", str(tmp_path / "empty"), "--resume"], tmp_path
    )

    assert refused.proc.returncode == 2, refused.transcript()
    assert len(refused.stderr) == 1 and "no checkpoint" in refused.stderr[0]


def test_stale_temporary_files_are_removed_at_start(tmp_path: Path) -> None:
    ckpt = tmp_path / "ck"
    ckpt.mkdir()
    stale = ckpt / ".ckpt_latest.pt.k3j2x9.tmp"
    stale.write_bytes(b"half a checkpoint from a run killed mid-save")
    keep = ckpt / "notes.txt"
    keep.write_text("not ours to delete")

    trainer = run_to_end([*FAST, "--steps", "2", "--ckpt-dir", str(ckpt)], tmp_path)

    assert trainer.proc.returncode == 0, trainer.transcript()
    assert not stale.exists()
    assert keep.exists()
    assert f"removed stale temporary file {stale.as_posix()}" in trainer.stdout


# --------------------------------------------------------------------------- in-process tests


@pytest.fixture(scope="module")
def train_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("reference_train", TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    # One thread, as the trainer subprocesses run (OMP_NUM_THREADS=1): torch's default (a thread per
    # core) spins against the rest of a loaded two-core machine (8.5 s instead of 2 s for 3 steps).
    torch.set_num_threads(1)
    return module


@pytest.fixture
def keep_signal_handlers() -> Iterator[None]:
    """train() installs its own SIGTERM/SIGINT handlers; give pytest its own back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_out_of_memory_halves_the_micro_batch_and_retries_the_same_step(
    train_module: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    keep_signal_handlers: None,
) -> None:
    real_step = train_module.accumulate_gradients
    calls: list[tuple[int, int]] = []  # (rows in the batch, micro-batch)

    def step_that_fits_only_two_rows(model: Any, opt: Any, x: Any, y: Any, micro: int) -> float:
        calls.append((x.size(0), micro))
        if micro > 2:
            raise train_module.TORCH_OOM("CUDA out of memory (simulated)")
        loss: float = real_step(model, opt, x, y, micro)
        return loss

    monkeypatch.setattr(train_module, "accumulate_gradients", step_that_fits_only_two_rows)
    monkeypatch.delenv("ARENA_STOP_FILE", raising=False)
    code = train_module.main([*FAST, "--steps", "3", "--ckpt-dir", str(tmp_path / "ck")])

    assert code == 0
    assert calls == [(4, 4), (4, 2), (4, 2), (4, 2)]  # step 1 retried, then stays at 2
    out = capsys.readouterr().out
    assert "memory retry at step 1: micro-batch 4 -> 2" in out
    assert load_checkpoint(tmp_path / "ck" / "ckpt_latest.pt")["step"] == 3


def test_out_of_memory_below_the_floor_is_raised(
    train_module: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    keep_signal_handlers: None,
) -> None:
    def always_out_of_memory(*_: Any) -> float:
        raise train_module.TORCH_OOM("CUDA out of memory (simulated)")

    monkeypatch.setattr(train_module, "accumulate_gradients", always_out_of_memory)
    args = [*FAST, "--steps", "3", "--min-micro-batch", "2", "--ckpt-dir", str(tmp_path / "ck")]

    with pytest.raises(train_module.TORCH_OOM):
        train_module.main(args)
    assert not (tmp_path / "ck" / "ckpt_latest.pt").exists()


def test_micro_batches_accumulate_the_gradient_of_the_whole_batch(
    train_module: ModuleType,
) -> None:
    corpus = train_module.load_corpus(train_module.DEFAULT_DATA)
    x, y = train_module.batch_for_step(corpus.train, 3, 1, 8, 64)
    torch.manual_seed(0)
    model = train_module.TinyGPT(train_module.ModelConfig(vocab_size=len(corpus.vocab)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    results = []
    for micro in (8, 3, 1):  # 3 leaves a ragged last micro-batch of 2 rows
        loss = train_module.accumulate_gradients(model, optimizer, x, y, micro)
        results.append((loss, [p.grad.clone() for p in model.parameters()]))

    whole_loss, whole_grads = results[0]
    assert any(g.abs().sum() > 0 for g in whole_grads)
    for loss, grads in results[1:]:
        assert loss == pytest.approx(whole_loss, rel=1e-5)
        for got, want in zip(grads, whole_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


def test_the_batch_of_a_step_depends_only_on_seed_and_step(train_module: ModuleType) -> None:
    corpus = train_module.load_corpus(train_module.DEFAULT_DATA)

    def batch(seed: int, step: int) -> Any:
        return train_module.batch_for_step(corpus.train, seed, step, 4, 64)[0]

    assert torch.equal(batch(1, 10), batch(1, 10))
    assert not torch.equal(batch(1, 10), batch(1, 11))
    assert not torch.equal(batch(1, 10), batch(2, 10))
    x, y = train_module.batch_for_step(corpus.train, 1, 10, 4, 64)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--ckpt-every", "501"], "--ckpt-every must be between 1 and 500"),
        (["--eval-every", "19"], "--eval-every must be at least 20"),
        (["--start-step", "5"], "--start-step needs --resume"),
        (["--min-micro-batch", "32"], "--min-micro-batch must be between 1 and --batch-size"),
    ],
)
def test_options_that_would_break_a_gate_or_a_resume_are_refused(
    train_module: ModuleType,
    capsys: pytest.CaptureFixture[str],
    option: list[str],
    message: str,
) -> None:
    with pytest.raises(SystemExit) as exited:
        train_module.parse_args(option)

    assert exited.value.code == 2
    assert message in capsys.readouterr().err
