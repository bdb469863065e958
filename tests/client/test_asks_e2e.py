"""The terminal's questions against a real ``arena-ls`` (contract 7.1, 7.3): ``1012
already-finished``, ``1011 checkpoint-mismatch``, ``1007`` with an old checkpoint, and a
stopped run's ``lost``. The server side of these is written in parallel with the client side
(issues 23 and 25); each test is skipped until the server's source has the refusal or field it
needs, so they run by themselves once the branches are merged. The client logic alone is
covered with contract-shaped data in tests/client/test_asks.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.client.support import (
    ARENA,
    WAIT,
    arena_env,
    one_line,
    run_arena,
    status_json,
    stop_every_run,
    unfinished_on_disk,
    wait_for_status,
)
from tests.helpers.lsp import FAKE_TRAINER, job, make_workspace

SERVER = Path(__file__).resolve().parents[2] / "arena_ls"


def server_source_has(text: str, *folders: str) -> bool:
    """Whether the server (not the client) mentions ``text``: the branch that adds it is merged."""
    roots = [SERVER / folder for folder in folders] if folders else [SERVER]
    for root in roots:
        for path in root.rglob("*.py"):
            if "client" not in path.relative_to(SERVER).parts and text in path.read_text(encoding="utf-8"):
                return True
    return False


needs_1012 = pytest.mark.skipif(
    not server_source_has('"already-finished"'),
    reason="the server has no 1012 already-finished yet (issue 23)",
)
needs_1011 = pytest.mark.skipif(
    not server_source_has('"checkpoint-mismatch"'),
    reason="the server has no 1011 checkpoint-mismatch yet (issue 23)",
)
needs_lost = pytest.mark.skipif(
    not server_source_has('"lost"', "protocol"), reason="RunInfo has no `lost` yet (issue 23)"
)
needs_old_checkpoint_stop = pytest.mark.skipif(
    not server_source_has("cadenceSeconds"), reason="1007 carries no lastCheckpoint/lost yet (issue 25)"
)

QUIET_AFTER = 3
"""The quiet trainer announces this many checkpoints, then none: its checkpoint grows old."""


def quiet_trainer(root: Path) -> None:
    """The fake trainer, changed to stop checkpointing after ``QUIET_AFTER`` saves."""
    source = FAKE_TRAINER.read_text(encoding="utf-8")
    periodic = "if args.ckpt_every and step % args.ckpt_every == 0:"
    assert periodic in source, "the fake trainer's periodic save moved: update this test"
    quiet = f"if args.ckpt_every and step % args.ckpt_every == 0 and step <= {QUIET_AFTER} * args.ckpt_every:"
    (root / "quiet_trainer.py").write_text(source.replace(periodic, quiet), encoding="utf-8")


def workspace_of(tmp_path: Path) -> Path:
    jobs = [
        job("done", "--steps", "5", "--ckpt-every", "5", kind="train"),
        job("long", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", kind="train"),
        {
            **job("quiet", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "2", kind="train"),
            "args": ["quiet_trainer.py", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "2"],
            "script": "quiet_trainer.py",
        },
    ]
    root = make_workspace(tmp_path / "ws", jobs)
    quiet_trainer(root)
    return root


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = workspace_of(tmp_path)
    yield root  # type: ignore[misc]
    stop_every_run(root)


def finish(root: Path, job_id: str) -> None:
    done = run_arena(root, "start", job_id, "--fresh", "--follow")
    assert done.returncode == 0, done.stdout + done.stderr


# -- 1012 already-finished -------------------------------------------------------------------


@needs_1012
def test_e2e_a_finished_job_is_refused_with_the_command_that_starts_over(workspace: Path) -> None:
    finish(workspace, "done")
    refused = run_arena(workspace, "start", "done")
    assert refused.returncode == 1, refused.stdout
    line = one_line(refused.stderr)
    assert line.startswith("arena: refused (already-finished): done is finished: it trained all 5 steps")
    assert line.endswith("to do it anyway: arena start done --fresh"), line
    again = run_arena(workspace, "start", "done", "--fresh", "--follow")
    assert again.returncode == 0 and "starting from step 0 (--fresh)" in again.stdout


@needs_1012
@pytest.mark.skipif(sys.platform == "win32", reason="a pty is POSIX")
def test_e2e_a_finished_job_on_a_terminal_asks_and_starts_over(workspace: Path) -> None:
    finish(workspace, "done")
    output, code = answer_on_a_terminal(workspace, ["start", "done"], "Start over from step 0", "y\n")
    assert code == 0, output
    assert "done is finished: it trained all 5 steps" in output
    assert re.search(r"started run done-\S+ of job done", output), output
    assert "starting from step 0" in output


def answer_on_a_terminal(root: Path, args: list[str], question: str, answer: str) -> tuple[str, int]:
    """Run ``arena ARGS`` on a pty, type ``answer`` once ``question`` shows; its output and exit."""
    import pty

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [*ARENA, *args, "--root", str(root)],
        stdin=follower,
        stdout=follower,
        stderr=follower,
        env=arena_env(),
        cwd=root,
    )
    os.close(follower)
    output = bytearray()
    asked = threading.Event()

    def read() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            output.extend(chunk)
            if question.encode() in output:
                asked.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert asked.wait(WAIT), output.decode("utf-8", "replace")
        os.write(leader, answer.encode())
        code = process.wait(WAIT)
        reader.join(WAIT)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    return output.decode("utf-8", "replace"), code


# -- 1011 checkpoint-mismatch ----------------------------------------------------------------


def wait_for_steps(root: Path, step: int) -> None:
    """Until ``arena status`` shows the active run at ``step`` or past it."""
    wait_for_status(
        root,
        lambda status: ((status["active"] or {}).get("step") or 0) >= step,
        "steps past it",
        files_say=lambda root: any((state.get("step") or 0) >= step for state in unfinished_on_disk(root)),
    )


def stopped_with_a_checkpoint(root: Path, job_id: str) -> int:
    """Start ``job_id``, stop it cooperatively after a checkpoint; the job's checkpoint step."""
    assert run_arena(root, "start", job_id, "--fresh").returncode == 0
    wait_for_status(
        root,
        lambda status: (status["active"] or {}).get("lastCheckpoint"),
        "a checkpoint",
        files_say=lambda root: any(state.get("lastCheckpoint") for state in unfinished_on_disk(root)),
    )
    stopped = run_arena(root, "stop", job_id)
    assert stopped.returncode == 0, stopped.stderr
    run = [r for r in status_json(root)["runs"] if r["jobId"] == job_id][-1]
    return int(run["lastCheckpoint"]["step"])


@needs_1011
def test_e2e_a_start_step_other_than_the_checkpoint_says_both_and_needs_confirm(workspace: Path) -> None:
    step = stopped_with_a_checkpoint(workspace, "long")
    refused = run_arena(workspace, "start", "long", "--start-step", "1")
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert f"You asked to start long at step 1, but its last checkpoint is step {step} (" in line, line
    assert re.search(r"saved \d+ (?:s|min) ago", line), line
    assert line.endswith("to do it anyway: arena start long --start-step 1 --confirm"), line
    confirmed = run_arena(workspace, "start", "long", "--start-step", "1", "--confirm")
    assert confirmed.returncode == 0, confirmed.stderr
    assert "resuming from the checkpoint at step 1" in confirmed.stdout


# -- lost --------------------------------------------------------------------------------------


@needs_lost
def test_e2e_a_kill_says_what_it_lost(workspace: Path) -> None:
    # The quiet trainer saves no more after step QUIET_AFTER * 2: a kill past it always loses
    # steps (the long job, saving every 5 steps, could be killed right on a save).
    last = QUIET_AFTER * 2
    assert run_arena(workspace, "start", "quiet").returncode == 0
    wait_for_steps(workspace, last + 4)
    killed = run_arena(workspace, "stop", "quiet", "--kill", "--confirm")
    assert killed.returncode == 0, killed.stderr  # a kill ends the run `stopped` (by kill)
    lost = re.search(
        r"killed at step (\d+); last checkpoint (\d+): (\d+) steps? \(\d+ (?:s|min)\) lost", killed.stdout
    )
    assert lost, killed.stdout
    step, checkpoint, steps = (int(group) for group in lost.groups())
    assert checkpoint == last and steps == step - checkpoint and steps >= 4


# -- 1007 with an old checkpoint --------------------------------------------------------------


@needs_old_checkpoint_stop
def test_e2e_a_stop_of_a_run_with_an_old_checkpoint_says_how_much_is_lost(workspace: Path) -> None:
    assert run_arena(workspace, "start", "quiet").returncode == 0
    last = QUIET_AFTER * 2
    wait_for_steps(workspace, 20 * last)
    refused = run_arena(workspace, "stop", "quiet")
    assert refused.returncode == 1, refused.stdout
    line = one_line(refused.stderr)
    assert f"This run's last checkpoint is step {last} (" in line, line
    assert re.search(r"stopping it now loses \d+ steps \(\d+ s\) of training", line), line
    assert line.startswith("arena: refused (no-checkpoint): This run's last checkpoint is step "), line
    assert line.endswith("to do it anyway: arena stop quiet --confirm"), line
    stopped = run_arena(workspace, "stop", "quiet", "--confirm")
    assert stopped.returncode == 0, stopped.stderr
    assert re.search(r"stopped at step (\d+); nothing lost \(checkpoint at step \1\)", stopped.stdout), (
        stopped.stdout
    )
