"""The trainer kit (arena_trainer.py, contract 8.1), in-process: each function, its lines as the
supervisor parses them, its signals and its stop file. The kill in the middle of a save and the
installs (wheel, a copy beside a script under ``-E``/``-I``) are in test_kit_processes.py."""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import arena_trainer
from arena_ls.run.trainer_announcements import Checkpoint, Eval, Progress, parse_arena_line

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / "arena_trainer.py"
INSTALL_HANDLER = signal.signal
"""Kept before any test patches ``signal.signal`` (the kit's ``signal`` is this same module)."""


@pytest.fixture(autouse=True)
def fresh_kit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test starts with no stop asked, no handlers installed, and gets the handlers back."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(arena_trainer, "_stop_reason", None)
    monkeypatch.setattr(arena_trainer, "_handlers_installed", False)
    monkeypatch.setattr(arena_trainer, "_interrupts", 0)
    monkeypatch.setattr(arena_trainer, "_resume_path_taken", None)
    monkeypatch.delenv("ARENA_STOP_FILE", raising=False)
    monkeypatch.delenv("ARENA_RESUME_STEP", raising=False)
    yield
    for signum, handler in saved.items():
        INSTALL_HANDLER(signum, handler)


def announced(text: str) -> list[Any]:
    """The events the supervisor reads from the kit's output, one per line (None: not an event)."""
    return [parse_arena_line(line) for line in text.splitlines()]


def payloads(text: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line.removeprefix("@arena ")) for line in text.splitlines()]


# --------------------------------------------------------------------------- the module itself


def test_the_source_is_python_3_8_grammar() -> None:
    """Python 3.8 or later (contract 8.1): no `match`, no parenthesised context managers, no
    walrus-era syntax beyond 3.8; annotations are never evaluated (``from __future__``)."""
    source = KIT.read_text(encoding="utf-8")
    ast.parse(source, feature_version=(3, 8))
    assert "from __future__ import annotations" in source


def test_it_imports_the_standard_library_only_at_module_level() -> None:
    tree = ast.parse(KIT.read_text(encoding="utf-8"))
    top_level: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            top_level.add(node.module.split(".")[0])
    assert top_level - {"__future__"} <= sys.stdlib_module_names
    assert not top_level & {"torch", "transformers", "lightning", "pytorch_lightning", "accelerate"}


def test_it_carries_protocol_1_and_the_contract_names() -> None:
    assert arena_trainer.PROTOCOL == 1
    for name in ("progress", "checkpoint", "save", "should_stop", "resume_step", "oom_retry", "empty_cache"):
        assert callable(getattr(arena_trainer, name))


def test_code_that_needs_the_source_finds_it() -> None:
    spec = importlib.util.find_spec("arena_trainer")
    assert spec is not None and spec.origin is not None
    assert Path(spec.origin).resolve() == KIT


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchCallback"):
        _ = arena_trainer.NoSuchCallback


# --------------------------------------------------------------------------- progress


def test_progress_is_a_line_the_supervisor_reads(capsys: pytest.CaptureFixture[str]) -> None:
    arena_trainer.progress(120, 2000, loss=2.3104, lr=0.0003)
    out = capsys.readouterr().out
    assert out.startswith('@arena {"event": "progress"') and out.endswith("\n")
    assert announced(out) == [Progress(step=120, total=2000, loss=2.3104, lr=0.0003)]
    assert payloads(out)[0]["protocol"] == 1


class FakeTensor:
    """What the kit needs of a tensor or numpy scalar: ``.item()``."""

    def __init__(self, value: float) -> None:
        self.value = value

    def item(self) -> float:
        return self.value


def test_progress_takes_tensors_and_carries_extra_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    arena_trainer.progress(FakeTensor(7), loss=FakeTensor(1.5), grad_norm=FakeTensor(0.25), tokens=4096)
    out = capsys.readouterr().out
    assert announced(out) == [Progress(step=7, total=None, loss=1.5, lr=None)]
    payload = payloads(out)[0]
    assert payload["grad_norm"] == 0.25 and payload["tokens"] == 4096
    assert "total" not in payload and "lr" not in payload  # absent values are left out


def test_a_metric_cannot_overwrite_the_event(capsys: pytest.CaptureFixture[str]) -> None:
    arena_trainer.progress(3, event="checkpoint")
    assert announced(capsys.readouterr().out) == [Progress(step=3)]


def test_a_nan_loss_is_announced_as_news(capsys: pytest.CaptureFixture[str]) -> None:
    arena_trainer.progress(5, loss=float("nan"))
    (event,) = announced(capsys.readouterr().out)
    assert isinstance(event, Progress) and event.loss is not None and event.loss != event.loss


def test_an_eval_line_is_what_arena_plot_draws(capsys: pytest.CaptureFixture[str]) -> None:
    arena_trainer._eval(40, FakeTensor(1.25))  # what the adapters announce from a validation
    assert announced(capsys.readouterr().out) == [Eval(step=40, loss=1.25)]


# --------------------------------------------------------------------------- the console


def test_a_non_utf8_console_prints_an_ascii_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A Windows console in cp1252 (or any code page) cannot encode "✓"; the line is ASCII."""
    raw = io.BytesIO()
    console = io.TextIOWrapper(raw, encoding="cp1252", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", console)
    saved = tmp_path / "ckpt ✓ é.pt"
    saved.write_bytes(b"weights")
    arena_trainer.checkpoint(10, saved)
    console.flush()
    line = raw.getvalue().decode("ascii")
    digest = hashlib.sha256(b"weights").hexdigest()
    assert announced(line) == [Checkpoint(step=10, path=str(saved), bytes=7, sha256=digest)]


def test_a_closed_or_missing_stdout_never_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = io.StringIO()
    closed.close()
    monkeypatch.setattr(sys, "stdout", closed)
    arena_trainer.progress(1, loss=1.0)
    monkeypatch.setattr(sys, "stdout", None)
    arena_trainer.progress(2, loss=1.0)


class BrokenPipeStream(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError("the reader went away")


def test_a_broken_pipe_is_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", BrokenPipeStream())
    arena_trainer.progress(1, loss=1.0)


# --------------------------------------------------------------------------- checkpoint


def test_a_file_checkpoint_carries_its_bytes_and_sha256(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "ckpt.pt"
    saved.write_bytes(b"x" * 5000)
    arena_trainer.checkpoint(500, saved)
    out = capsys.readouterr().out
    digest = hashlib.sha256(b"x" * 5000).hexdigest()
    assert announced(out) == [Checkpoint(step=500, path=str(saved), bytes=5000, sha256=digest)]
    payload = payloads(out)[0]
    assert payload["bytes"] == 5000
    assert payload["sha256"] == hashlib.sha256(b"x" * 5000).hexdigest()


def manifest_digest(folder: Path) -> tuple[int, str]:
    """The folder digest as docs/trainer-guide.md describes it, computed independently."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    entries = sorted(
        (p.relative_to(folder).as_posix(), hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size)
        for p in files
    )
    text = "".join(f"{sha}  {size}  {rel}\n" for rel, sha, size in entries)
    return sum(size for _, _, size in entries), hashlib.sha256(text.encode()).hexdigest()


def hf_like_folder(root: Path) -> Path:
    folder = root / "out" / "checkpoint-20"
    (folder / "nested").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"m" * 300)
    (folder / "trainer_state.json").write_text('{"global_step": 20}')
    (folder / "nested" / "optimizer.pt").write_bytes(b"o" * 70)
    return folder


def test_a_folder_checkpoint_carries_its_manifests_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = hf_like_folder(tmp_path)
    arena_trainer.checkpoint(20, folder)
    payload = payloads(capsys.readouterr().out)[0]
    assert (payload["bytes"], payload["sha256"]) == manifest_digest(folder)
    assert payload["path"] == str(folder) and payload["step"] == 20


def test_the_folder_digest_changes_with_any_file_its_name_or_a_new_file(tmp_path: Path) -> None:
    folder = hf_like_folder(tmp_path)
    before = arena_trainer.digest(folder)
    (folder / "nested" / "optimizer.pt").write_bytes(b"O" * 70)  # same size, other content
    changed = arena_trainer.digest(folder)
    (folder / "nested" / "optimizer.pt").rename(folder / "nested" / "optimiser.pt")
    renamed = arena_trainer.digest(folder)
    (folder / "rng_state.pth").write_bytes(b"")
    added = arena_trainer.digest(folder)
    assert len({before[1], changed[1], renamed[1], added[1]}) == 4
    assert before[0] == changed[0] == renamed[0] == added[0] == 370 + len('{"global_step": 20}')


def test_announcing_a_checkpoint_that_is_not_there_raises_and_prints_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(FileNotFoundError):
        arena_trainer.checkpoint(3, tmp_path / "never-saved.pt")
    assert capsys.readouterr().out == ""


def test_only_if_written_announces_what_this_process_wrote_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """torchtitan's manager decides itself whether a call saves: one kit line after it announces
    the step's folder when it was written, and neither a missing one nor one an earlier process
    left there."""
    old = tmp_path / "step-10"
    old.mkdir()
    (old / "model.distcp").write_bytes(b"an earlier run")
    os.utime(old / "model.distcp", (1_000_000, 1_000_000))
    os.utime(old, (1_000_000, 1_000_000))
    monkeypatch.setattr(arena_trainer, "_LOADED_AT", 2_000_000.0)
    assert arena_trainer.checkpoint(10, old, only_if_written=True) is False
    assert arena_trainer.checkpoint(20, tmp_path / "step-20", only_if_written=True) is False
    assert capsys.readouterr().out == ""
    new = tmp_path / "step-30"
    new.mkdir()
    (new / "model.distcp").write_bytes(b"this run")
    monkeypatch.setattr(arena_trainer, "_LOADED_AT", os.stat(new).st_mtime)
    assert arena_trainer.checkpoint(30, new, only_if_written=True) is True
    assert [event.step for event in announced(capsys.readouterr().out)] == [30]


def test_only_if_written_sees_a_file_rewritten_inside_an_old_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "step-10"
    (folder / "shard").mkdir(parents=True)
    os.utime(folder, (1_000_000, 1_000_000))
    (folder / "shard" / "rank0.pt").write_bytes(b"rewritten in place")
    monkeypatch.setattr(arena_trainer, "_LOADED_AT", os.stat(folder / "shard" / "rank0.pt").st_mtime)
    os.utime(folder / "shard", (1_000_000, 1_000_000))
    assert arena_trainer.checkpoint(10, folder, only_if_written=True) is True
    assert announced(capsys.readouterr().out)[0].bytes == len(b"rewritten in place")


# --------------------------------------------------------------------------- save


@pytest.fixture(scope="module")
def torch() -> ModuleType:
    """Imported by the first test that asks, not while the suite is collected (PyTorch takes a
    second or two to import, which every worker of ``pytest -n`` would pay at collection)."""
    return pytest.importorskip("torch")


def test_save_writes_loads_and_announces_the_final_file(
    torch: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "new" / "folder" / "ckpt.pt"  # the folder is created
    state = {"model": {"w": torch.arange(4.0)}, "step": 9}
    assert arena_trainer.save(state, target, 9) == str(target)
    loaded = torch.load(target, weights_only=True)
    assert loaded["step"] == 9 and torch.equal(loaded["model"]["w"], torch.arange(4.0))
    payload = payloads(capsys.readouterr().out)[0]
    assert payload["event"] == "checkpoint" and payload["path"] == str(target)
    assert (payload["bytes"], payload["sha256"]) == arena_trainer.digest(target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["ckpt.pt"]  # no temporary left


def test_save_replaces_the_previous_checkpoint(torch: ModuleType, tmp_path: Path) -> None:
    target = tmp_path / "ckpt.pt"
    arena_trainer.save({"step": 1}, target, 1)
    arena_trainer.save({"step": 2}, target, 2)
    assert torch.load(target, weights_only=True)["step"] == 2


def test_a_failed_save_keeps_the_old_file_and_removes_the_temporary(
    torch: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "ckpt.pt"
    arena_trainer.save({"step": 1}, target, 1)
    capsys.readouterr()
    with pytest.raises(Exception, match=r"pickle|lambda"):
        arena_trainer.save({"step": 2, "oops": lambda: 0}, target, 2)
    assert torch.load(target, weights_only=True)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    assert capsys.readouterr().out == ""  # nothing announced for the failed save


def dead_pid() -> int:
    """The PID of a process that has ended and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=120)
    return child.pid


def test_a_save_removes_the_temporaries_dead_processes_left_and_no_other(
    torch: ModuleType, tmp_path: Path
) -> None:
    """A kill in the middle of a save leaves ``.NAME.PID.tmp``: the next save of the same path
    removes those of dead processes; a live process's and any other file stay."""
    dead = dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        names = {
            "dead": f".ckpt.pt.{dead}.tmp",
            "live": f".ckpt.pt.{live.pid}.tmp",
            "other file's": f".other.pt.{dead}.tmp",
            "not a pid": ".ckpt.pt.12ab.tmp",
            "no pid": ".ckpt.pt..tmp",
            "user's": "ckpt.pt.tmp",
        }
        for name in names.values():
            (tmp_path / name).write_bytes(b"torn")
        (tmp_path / f".ckpt.pt.{dead + 1 if dead + 1 != live.pid else dead + 2}.tmp").mkdir()  # a folder
        target = tmp_path / "ckpt.pt"
        arena_trainer.save({"step": 5}, target, 5)
        left = {p.name for p in tmp_path.iterdir()}
        assert names["dead"] not in left
        assert {names[k] for k in names if k != "dead"} <= left
        assert "ckpt.pt" in left and len(left) == len(names) + 1  # the folder stays too
    finally:
        live.stdin.close()  # type: ignore[union-attr]
        live.wait(timeout=120)


def test_removing_stale_temporaries_never_fails(tmp_path: Path) -> None:
    assert arena_trainer.remove_stale_temporaries(tmp_path / "missing" / "ckpt.pt") == []
    stale = tmp_path / f".ckpt.pt.{dead_pid()}.tmp"
    stale.write_bytes(b"torn")
    own = tmp_path / f".ckpt.pt.{os.getpid()}.tmp"  # this process's own (another thread's save)
    own.write_bytes(b"being written")
    assert arena_trainer.remove_stale_temporaries(tmp_path / "ckpt.pt") == [str(stale)]
    assert own.exists()


class FakeKernel32:
    """``OpenProcess``/``GetExitCodeProcess`` as Windows answers them, for one PID's fate."""

    def __init__(self, handle: int, last_error: int = 0, exit_code: int = 259) -> None:
        self.handle, self.last_error, self.exit_code, self.closed = handle, last_error, exit_code, 0

    def OpenProcess(self, access: int, inherit: bool, pid: int) -> int:
        assert access == 0x1000 and inherit is False
        return self.handle

    def GetLastError(self) -> int:
        return self.last_error

    def GetExitCodeProcess(self, handle: int, code: Any) -> int:
        code._obj.value = self.exit_code
        return 1

    def CloseHandle(self, handle: int) -> int:
        self.closed += 1
        return 1


@pytest.mark.parametrize(
    ("kernel", "alive"),
    [
        (FakeKernel32(0, last_error=87), False),  # ERROR_INVALID_PARAMETER: no such process
        (FakeKernel32(0, last_error=5), True),  # access denied: it exists
        (FakeKernel32(7, exit_code=259), True),  # STILL_ACTIVE
        (FakeKernel32(7, exit_code=0), False),  # it has exited (a handle still held elsewhere)
    ],
)
def test_windows_asks_openprocess_never_os_kill(
    monkeypatch: pytest.MonkeyPatch, kernel: FakeKernel32, alive: bool
) -> None:
    """On Windows ``os.kill(pid, 0)`` would terminate the process: the kit asks ``OpenProcess``."""
    import ctypes

    kernel.closed = 0  # the parameter is one object for every repetition (pytest-repeat)

    monkeypatch.setattr(ctypes, "windll", type("WinDLL", (), {"kernel32": kernel}), raising=False)
    monkeypatch.setattr(arena_trainer.os, "name", "nt")
    monkeypatch.setattr(arena_trainer.os, "kill", lambda *a: pytest.fail("os.kill on Windows"))
    assert arena_trainer._process_alive(4242) is alive
    assert kernel.closed == (1 if kernel.handle else 0)


def test_a_replace_blocked_for_a_moment_on_windows_is_tried_again(
    torch: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An antivirus or a reader holding the old checkpoint makes ``os.replace`` fail on Windows."""
    real_replace = os.replace
    calls: list[str] = []

    def held_twice(source: str, target: str) -> None:
        calls.append(source)
        if len(calls) <= 2:
            raise PermissionError(13, "The process cannot access the file")
        real_replace(source, target)

    monkeypatch.setattr(arena_trainer.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(arena_trainer.os, "replace", held_twice)
    target = tmp_path / "ckpt.pt"
    arena_trainer.save({"step": 4}, target, 4)
    assert len(calls) == 3 and torch.load(target, weights_only=True)["step"] == 4


# --------------------------------------------------------------------------- should_stop


def test_no_stop_by_default() -> None:
    assert arena_trainer.should_stop() is False
    assert arena_trainer.stop_reason() is None


def test_the_stop_file_asks_for_a_stop_and_it_stays_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_file = tmp_path / "STOP"
    monkeypatch.setenv("ARENA_STOP_FILE", str(stop_file))
    assert arena_trainer.should_stop() is False
    stop_file.write_text("stop requested\n")
    assert arena_trainer.should_stop() is True
    stop_file.unlink()
    assert arena_trainer.should_stop() is True
    assert arena_trainer.stop_reason() == "stop file"


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT"])
def test_a_signal_only_sets_the_flag(signame: str) -> None:
    assert arena_trainer.should_stop() is False  # installs the handlers
    signum = getattr(signal, signame)
    assert signal.getsignal(signum) is arena_trainer._on_signal
    signal.raise_signal(signum)  # runs the handler here, in the main thread
    assert arena_trainer.should_stop() is True
    assert arena_trainer.stop_reason() == signame


def test_a_second_sigint_interrupts_at_once() -> None:
    """A person pressing Ctrl-C twice at the console gets Python's usual interrupt."""
    arena_trainer.should_stop()
    signal.raise_signal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    assert arena_trainer.stop_reason() == "SIGINT"


def test_a_second_sigterm_is_still_only_a_flag() -> None:
    arena_trainer.should_stop()
    signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGTERM)
    assert arena_trainer.should_stop() is True


def test_off_the_main_thread_nothing_is_installed_and_nothing_raised() -> None:
    before = signal.getsignal(signal.SIGTERM)
    answers: list[bool] = []
    worker = threading.Thread(target=lambda: answers.append(arena_trainer.should_stop()))
    worker.start()
    worker.join(timeout=30)
    assert answers == [False]
    assert signal.getsignal(signal.SIGTERM) is before
    assert arena_trainer.should_stop() is False  # the main thread's first call installs them
    assert signal.getsignal(signal.SIGTERM) is arena_trainer._on_signal


def test_a_signal_outside_the_main_interpreter_is_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(signum: int, handler: object) -> None:
        raise ValueError("signal only works in main thread of the main interpreter")

    monkeypatch.setattr(arena_trainer.signal, "signal", refuse)
    assert arena_trainer.should_stop() is False
    assert arena_trainer._handlers_installed is False


def test_on_windows_ctrl_break_is_a_stop_signal_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """CTRL_BREAK_EVENT (the agent's stop signal on Windows) arrives as SIGBREAK."""
    monkeypatch.setattr(arena_trainer.sys, "platform", "win32")
    monkeypatch.setattr(arena_trainer.signal, "SIGBREAK", 21, raising=False)
    installed: dict[int, object] = {}
    monkeypatch.setattr(
        arena_trainer.signal, "signal", lambda signum, handler: installed.setdefault(signum, handler)
    )
    assert arena_trainer.should_stop() is False
    assert set(installed) == {signal.SIGTERM, signal.SIGINT, 21}
    assert all(handler is arena_trainer._on_signal for handler in installed.values())


# --------------------------------------------------------------------------- resume_step


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], None),
        (["--steps", "100"], None),
        (["--resume", "--start-step", "500"], 500),
        (["--start-step=40"], 40),
        (["--resume_step", "7"], 7),
        (["--start-step", "1", "--start-step", "2"], 2),  # the last one, as argparse takes it
        (["--", "--start-step", "9"], None),
    ],
)
def test_resume_step_from_the_command_line(argv: list[str], expected: int | None) -> None:
    assert arena_trainer.resume_step(argv) == expected


def test_resume_step_reads_sys_argv_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["train.py", "--resume", "--start-step", "300"])
    assert arena_trainer.resume_step() == 300


def test_resume_step_from_the_environment_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_RESUME_STEP", "60")
    assert arena_trainer.resume_step(["--start-step", "5"]) == 60


@pytest.mark.parametrize("value", ["-1", "ten", "1.5", "{step}"])
def test_an_unreadable_resume_step_is_refused_not_taken_for_a_fresh_start(value: str) -> None:
    with pytest.raises(ValueError, match="resume step"):
        arena_trainer.resume_step(["--start-step", value])


# --------------------------------------------------------------------------- resume_path


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], None),
        (["--ckpt_path", "x.ckpt"], None),
        (["--resume-path", "checkpoints/epoch=1.ckpt"], "checkpoints/epoch=1.ckpt"),
        (["--resume_path=out/checkpoint-40"], "out/checkpoint-40"),
        (["--resume-path", "a", "--resume-path", "b"], "b"),
        (["--", "--resume-path", "a"], None),
        (["--resume-path"], None),
    ],
)
def test_resume_path_from_the_command_line(argv: list[str], expected: str | None) -> None:
    assert arena_trainer.resume_path(argv) == expected


def test_resume_path_given_argv_leaves_sys_argv_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["train.py", "--resume-path", "a.ckpt"])
    assert arena_trainer.resume_path(["--resume-path", "b.ckpt"]) == "b.ckpt"
    assert sys.argv == ["train.py", "--resume-path", "a.ckpt"]


def test_resume_path_takes_its_option_off_sys_argv_for_the_scripts_own_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """LightningCLI(run=False) and argparse refuse an option they do not know: the kit's is gone."""
    argv = ["train.py", "--trainer.max_epochs=2", "--resume-path", "ck/last.ckpt", "--resume_path=x"]
    monkeypatch.setattr(sys, "argv", [*argv, "--seed", "1"])
    assert arena_trainer.resume_path() == "x"
    assert sys.argv == ["train.py", "--trainer.max_epochs=2", "--seed", "1"]
    parser = argparse.ArgumentParser()
    parser.add_argument("--trainer.max_epochs")
    parser.add_argument("--seed")
    parser.parse_args()  # would exit 2 on an unrecognised --resume-path
    assert arena_trainer.resume_path() == "x", "a second call gives the same path, never a fresh start"


def test_a_fresh_launch_has_no_resume_path_however_often_it_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["train.py", "--steps", "5"])
    assert arena_trainer.resume_path() is None
    assert arena_trainer.resume_path() is None
    assert sys.argv == ["train.py", "--steps", "5"]


def test_resume_path_keeps_what_follows_a_double_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["train.py", "--resume-path", "a", "--", "--resume-path", "b"])
    assert arena_trainer.resume_path() == "a"
    assert sys.argv == ["train.py", "--", "--resume-path", "b"]


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_resume_path_is_refused_not_taken_for_a_fresh_start(value: str) -> None:
    with pytest.raises(ValueError, match="resume path"):
        arena_trainer.resume_path(["--resume-path", value])


# --------------------------------------------------------------------------- oom_retry


class Flaky:
    """A training step that runs out of memory ``failures`` times, then succeeds."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return 0.5


def test_oom_retry_tries_the_same_step_again(torch: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    step = Flaky(2, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert arena_trainer.oom_retry(step) == 0.5
    assert step.calls == 3
    assert capsys.readouterr().out.count("out of memory: emptied the cache") == 2


def test_oom_retry_knows_the_older_runtime_error_spelling() -> None:
    step = Flaky(1, RuntimeError("CUDA error: out of memory"))
    assert arena_trainer.oom_retry(step, retries=1) == 0.5


def test_oom_retry_gives_up_after_its_retries_with_the_last_error(
    torch: ModuleType,
) -> None:
    step = Flaky(5, torch.cuda.OutOfMemoryError("CUDA out of memory"))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        arena_trainer.oom_retry(step, retries=3)
    assert step.calls == 4


def test_oom_retry_never_retries_another_error() -> None:
    step = Flaky(1, RuntimeError("shape mismatch"))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        arena_trainer.oom_retry(step)
    assert step.calls == 1


def test_oom_retry_empties_the_cache_between_attempts(
    torch: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    emptied: list[int] = []
    step = Flaky(2, torch.OutOfMemoryError("out of memory"))
    monkeypatch.setattr(arena_trainer, "_release_cached_memory", lambda: emptied.append(step.calls) or True)
    arena_trainer.oom_retry(step)
    assert emptied == [1, 2]


# --------------------------------------------------------------------------- empty_cache


def test_empty_cache_on_its_cadence_only(monkeypatch: pytest.MonkeyPatch) -> None:
    emptied: list[bool] = []
    monkeypatch.setattr(arena_trainer, "_release_cached_memory", lambda: emptied.append(True) or True)
    done = [step for step in range(0, 201) if arena_trainer.empty_cache(step, every=50)]
    assert done == [50, 100, 150, 200] and len(emptied) == 4


def test_empty_cache_without_cuda_does_nothing(
    torch: ModuleType,
) -> None:
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the no-CUDA path is not")
    assert arena_trainer.empty_cache(50) is False


def test_empty_cache_refuses_a_cadence_below_one() -> None:
    with pytest.raises(ValueError, match="every"):
        arena_trainer.empty_cache(10, every=0)
