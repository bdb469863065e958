"""The trainer kit with real processes: a kill in the middle of ``save``, the wheel that ships it,
and a copy beside a script under ``python -E`` and ``-I`` (contract 8.1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest

from arena_ls.run.trainer_announcements import Checkpoint, Progress, parse_arena_line
from tests.helpers.lazy_import import LazyModule

torch = LazyModule("torch")  # imported by the first test that uses it (tests/helpers/lazy_import.py)

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / "arena_trainer.py"
DEADLINE_S = 120.0

SAVE_THEN_HANG = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[1])
    import torch
    import arena_trainer

    target = sys.argv[2]
    arena_trainer.save({"step": 1, "w": torch.zeros(1000)}, target, 1)

    def hang(fd):  # the new checkpoint is written to the temporary file, not yet renamed
        print("mid-save", flush=True)
        sys.stdin.read()

    os.fsync = hang
    arena_trainer.save({"step": 2, "w": torch.ones(200000)}, target, 2)
    print("save finished", flush=True)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_kill_in_the_middle_of_a_save_leaves_the_old_checkpoint_whole(tmp_path: Path) -> None:
    target = tmp_path / "ckpt.pt"
    script = tmp_path / "trainer.py"
    script.write_text(SAVE_THEN_HANG)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(REPO), str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines = []
        for line in proc.stdout:  # ends at the marker, or at EOF if the child died first
            lines.append(line)
            if line.strip() == "mid-save":
                break
        assert lines and lines[-1].strip() == "mid-save", lines
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE_S)
    announced = [(c.step, c.path) for c in map(parse_arena_line, lines) if isinstance(c, Checkpoint)]
    assert (1, str(target)) in announced
    assert (2, str(target)) not in announced
    old = torch.load(target, weights_only=True)
    assert old["step"] == 1 and old["w"].shape == (1000,)
    torn = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(torn) == 1 and torn[0].stat().st_size > 200000 * 4  # the new one was all but renamed
    # The next save to the same path removes the dead process's temporary (and leaves no other).
    arena_trainer = load_kit()
    arena_trainer.save({"step": 3}, target, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt", "trainer.py"]
    assert torch.load(target, weights_only=True)["step"] == 3


def load_kit() -> Any:
    """The kit of this checkout (the test's own process: the saving trainer is dead)."""
    import arena_trainer

    assert Path(arena_trainer.__file__).resolve() == KIT
    return arena_trainer


BESIDE_SCRIPT = textwrap.dedent(
    """
    import sys
    import arena_trainer
    arena_trainer.progress(3, 10, loss=1.25)
    print("stop", arena_trainer.should_stop())
    heavy = sorted(m for m in ("torch", "transformers", "lightning", "accelerate") if m in sys.modules)
    print("frameworks", heavy)
    print("kit", arena_trainer.__file__)
    """
)


FIND_BESIDE = "import os, sys; sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
"""What a script run under ``-I`` needs before ``import arena_trainer`` (docs/trainer-guide.md)."""


@pytest.mark.parametrize(("flag", "prelude"), [("-E", ""), ("-I", FIND_BESIDE)])
def test_a_copy_beside_the_script_works_under_interpreter_flags(
    tmp_path: Path, flag: str, prelude: str
) -> None:
    """``-E`` ignores PYTHONPATH, and the script's own folder is still ``sys.path[0]``: a copy
    there is found. ``-I`` leaves the script's folder off ``sys.path`` too (Python's docs), so a
    script run that way names its own folder first (one line), or arena-ls is pip-installed."""
    folder = tmp_path / "E_train"
    folder.mkdir()
    shutil.copy(KIT, folder / "arena_trainer.py")
    (folder / "train.py").write_text(prelude + BESIDE_SCRIPT)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    done = subprocess.run(
        [sys.executable, flag, str(folder / "train.py")],
        cwd=elsewhere,
        env={"PYTHONPATH": str(tmp_path / "nothing-here"), "ARENA_STOP_FILE": str(tmp_path / "STOP")},
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert parse_arena_line(lines[0]) == Progress(step=3, total=10, loss=1.25)
    assert lines[1:] == ["stop False", "frameworks []", f"kit {folder / 'arena_trainer.py'}"]


ON_PYTHON_38 = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import arena_trainer as arena
    arena.progress(1, 10, loss=2.5, lr=0.1)
    with open("f.bin", "wb") as f:
        f.write(b"abc")
    arena.checkpoint(1, "f.bin")
    os.makedirs(os.path.join("d", "sub"))
    with open(os.path.join("d", "sub", "x"), "w") as f:
        f.write("x")
    arena.checkpoint(2, "d")
    print(arena.should_stop(), arena.resume_step(["--start-step", "3"]), arena.empty_cache(50))
    print(arena.oom_retry(lambda: 7))
    sys.argv[1:] = ["--resume-path", "ck/x.pt", "--seed", "1"]
    print(arena.resume_path(), sys.argv[1:], arena.resume_path())
    """
)


def oldest_python() -> str | None:
    """A Python 3.8 that runs on this machine (pyenv's own, not its shim), if there is one."""
    for candidate in (os.path.expanduser("~/.pyenv/versions/3.8.18/bin/python"), shutil.which("python3.8")):
        if not candidate or not os.path.exists(candidate):
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 8))"],
            capture_output=True, text=True, timeout=DEADLINE_S,
        )  # fmt: skip
        if probe.stdout.strip() == "True":
            return candidate
    return None


def test_the_kit_runs_on_python_3_8(tmp_path: Path) -> None:
    """Beyond the grammar: the calls a plain loop makes, on a real 3.8 interpreter (no torch there)."""
    python = oldest_python()
    if python is None:
        pytest.skip("no Python 3.8 on this machine")
    shutil.copy(KIT, tmp_path / "arena_trainer.py")
    (tmp_path / "train.py").write_text(ON_PYTHON_38)
    done = subprocess.run(
        [python, "-I", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert parse_arena_line(lines[0]) == Progress(step=1, total=10, loss=2.5, lr=0.1)
    first, second = parse_arena_line(lines[1]), parse_arena_line(lines[2])
    assert isinstance(first, Checkpoint) and (first.step, first.path) == (1, "f.bin")
    assert isinstance(second, Checkpoint) and (second.step, second.path) == (2, "d")
    assert first.bytes is not None and first.sha256 is not None, "the kit announces both on 3.8 too"
    assert lines[3:] == ["False 3 False", "7", "ck/x.pt ['--seed', '1'] ck/x.pt"]


def test_under_dash_i_the_scripts_folder_is_not_searched(tmp_path: Path) -> None:
    """Why the guide's ``-I`` line exists: without it the copy beside the script is not found
    (``-S`` too: as on a machine where arena-ls is not installed, which this checkout's venv is)."""
    shutil.copy(KIT, tmp_path / "arena_trainer.py")
    (tmp_path / "train.py").write_text("import arena_trainer\n")
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(tmp_path / "train.py")],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert done.returncode == 1 and "No module named 'arena_trainer'" in done.stderr


def test_the_editable_install_provides_it_from_the_repository(tmp_path: Path) -> None:
    """This checkout's install (``pip install -e .``, scripts/bootstrap.sh): from any folder, under
    ``-I`` (no working folder, no PYTHONPATH on ``sys.path``), the module is the repository's file."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", "import arena_trainer; print(arena_trainer.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == KIT


def test_the_wheel_ships_the_kit_as_a_top_level_module(tmp_path: Path) -> None:
    """A regular (not editable) install: the wheel carries ``arena_trainer.py`` at its root."""
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
         str(tmp_path / "dist"), str(REPO)],
        capture_output=True, text=True, timeout=DEADLINE_S * 2,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("arena_ls-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "arena_trainer.py" in names
        assert archive.read("arena_trainer.py") == KIT.read_bytes()
    installed = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
         str(installed), str(wheel)],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    probe = subprocess.run(
        [sys.executable, "-I", "-c",
         f"import sys; sys.path.insert(0, {str(installed)!r}); import arena_trainer; "
         "print(arena_trainer.PROTOCOL, arena_trainer.__file__)"],
        capture_output=True, text=True, timeout=DEADLINE_S,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["1", str(installed / "arena_trainer.py")]
