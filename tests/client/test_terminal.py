"""``arena`` on a real terminal (a pty), and the real demo with the PyTorch trainer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.client.support import ARENA, WAIT, arena_env, run_arena, stop_every_run

REPO = Path(__file__).resolve().parents[2]
REAL_MANIFEST = REPO / "training" / "manifest.json"
DEMO_STEPS = "60"


def read_all(fd: int, into: bytearray) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's other side closed
            return
        if not chunk:
            return
        into.extend(chunk)


@pytest.mark.skipif(sys.platform == "win32", reason="a pty is POSIX")
def test_on_a_terminal_the_log_scrolls_above_a_live_progress_bar(workspace: Path) -> None:
    import pty

    leader, follower = pty.openpty()
    env = arena_env()
    env.pop("ARENA_NO_COLOR")
    env["TERM"] = "xterm-256color"
    process = subprocess.Popen(
        [*ARENA, "start", "quick", "--follow", "--root", str(workspace)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        cwd=workspace,
    )
    os.close(follower)
    output = bytearray()
    reader = threading.Thread(target=read_all, args=(leader, output), daemon=True)
    reader.start()
    try:
        assert process.wait(WAIT) == 0
        reader.join(WAIT)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    text = output.decode("utf-8", "replace")
    assert "\x1b[" in text, "a terminal gets the live display"
    assert "numbered 15" in text and "Job quick" in text
    assert "step 15/15" in text
    assert "succeeded" in text.splitlines()[-1]


def with_steps(args: list[str], steps: str) -> list[str]:
    if "--steps" in args:
        index = args.index("--steps")
        return [*args[: index + 1], steps, *args[index + 2 :]]
    return [*args, "--steps", steps]


@pytest.mark.timeout(600)
def test_the_real_demo_trains_tiny_lm_and_shows_its_checkpoints(tmp_path: Path) -> None:
    if not REAL_MANIFEST.is_file():
        pytest.skip("training/manifest.json is not in the repository yet")
    pytest.importorskip("torch")
    manifest = json.loads(REAL_MANIFEST.read_text())
    tiny = next((j for j in manifest.get("jobs", []) if j.get("id") == "tiny-lm"), None)
    if tiny is None:
        pytest.skip("the repository's manifest has no tiny-lm job")
    root = tmp_path / "ws"
    ignore = shutil.ignore_patterns("__pycache__", "checkpoints", ".aide")
    shutil.copytree(REPO / "training", root / "training", ignore=ignore)
    tiny["args"] = with_steps(list(tiny.get("args", [])), DEMO_STEPS)
    (root / "training" / "manifest.json").write_text(json.dumps(manifest, indent=2))
    try:
        done = run_arena(root, "demo", timeout=540)
    finally:
        stop_every_run(root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    last = done.stdout.splitlines()[-1]
    assert last.startswith("latest checkpoint: ") and last.endswith(f"(step {DEMO_STEPS})"), last
    checkpoint = Path(last.removeprefix("latest checkpoint: ").rsplit(" (step", 1)[0])
    assert checkpoint.is_file() and checkpoint.is_relative_to(root.resolve())
