"""A relaunch's resume arguments and a trainer's own strict parser (issue 35, contract 8.1).

arena-ls relaunches a trainer with ``resume.args`` appended (``--resume --start-step N`` by
default). A plain loop that reads its step with ``arena_trainer.resume_step()`` often has an
argparse parser of its own that declares neither option; ``parse_args()`` exited with
"unrecognized arguments" and every relaunch failed (the gates passed it: the kit's call keeps
AR007 and AR008). Now the agent names what it appended in ``ARENA_RESUME_ARGS`` and the kit takes
exactly those arguments from the leftovers of a parser reading ``sys.argv``; a parser that declares
an option still reads it, nothing changes outside arena-ls, and a script that would then start over
its checkpoints (it reads neither the option nor ``resume_step()``) is stopped before it announces
or saves anything. Real interpreters run small scripts; one end-to-end run through arena-ls.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from arena_ls.agent.resume_args import RESUME_ARGS_VARIABLE, resume_env
from arena_ls.agent.trainer_start import trainer_argv, trainer_env
from tests.helpers.lsp import all_logs, make_workspace, start_server, stop_server, wait_for, wait_status

REPO = Path(__file__).resolve().parents[2]
KIT = REPO / "arena_trainer.py"
TRAINER = REPO / "tests" / "fixtures" / "trainers" / "kit_strict_parser_trainer.py"
RELAUNCH = ["--resume", "--start-step", "200"]
DEADLINE = 120.0

STRICT_PARSER = """
    import argparse, sys
    import arena_trainer as arena
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    """


def run_script(
    tmp_path: Path, body: str, argv: list[str], resume_args: list[str] | None
) -> subprocess.CompletedProcess[str]:
    """Run ``body`` beside a copy of the kit, as arena-ls would (``ARENA_RESUME_ARGS`` when resuming)."""
    shutil.copy(KIT, tmp_path / "arena_trainer.py")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(STRICT_PARSER) + textwrap.dedent(body), encoding="utf-8")
    env = {key: value for key, value in os.environ.items() if key != RESUME_ARGS_VARIABLE}
    if resume_args is not None:
        env[RESUME_ARGS_VARIABLE] = json.dumps(resume_args)
    return subprocess.run(
        [sys.executable, "-E", str(script), *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- the kit ----------------------------------------------------------------------------------


def test_a_parser_that_declares_neither_option_accepts_the_relaunch_and_the_kit_reads_the_step(
    tmp_path: Path,
) -> None:
    body = """
    args = parser.parse_args()
    print("step", arena.resume_step(), "steps", args.steps)
    arena.progress(201, 300)
    """
    done = run_script(tmp_path, body, ["--steps", "300", *RELAUNCH], RELAUNCH)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "step 200 steps 300"
    assert '"step": 201' in done.stdout


def test_a_parser_that_declares_the_step_reads_it_itself(tmp_path: Path) -> None:
    body = """
    parser.add_argument("--start-step", type=int, default=0)
    args = parser.parse_known_args()[0] if "--known" in sys.argv else parser.parse_args(
        [a for a in sys.argv[1:] if a != "--resume"])
    print("own", args.start_step)
    args = parser.parse_known_args()
    print("extras", args[1])
    arena.progress(args[0].start_step + 1, 300)
    """
    done = run_script(tmp_path, body, RELAUNCH, RELAUNCH)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["own 200", "extras []"], "the declared option is the parser's; --resume taken"
    assert '"step": 201' in lines[2]


def test_outside_arena_ls_a_strict_parser_refuses_what_it_does_not_declare(tmp_path: Path) -> None:
    done = run_script(tmp_path, "args = parser.parse_args()\n", RELAUNCH, None)
    assert done.returncode == 2 and "unrecognized arguments: --resume --start-step 200" in done.stderr


@pytest.mark.parametrize("resume_args", ['["--resume"', '{"a": 1}', "[]", "[1, 2]"])
def test_an_unreadable_variable_changes_nothing(tmp_path: Path, resume_args: str) -> None:
    shutil.copy(KIT, tmp_path / "arena_trainer.py")
    (tmp_path / "train.py").write_text(
        textwrap.dedent(STRICT_PARSER) + "parser.parse_args()\n", encoding="utf-8"
    )
    env = {**os.environ, RESUME_ARGS_VARIABLE: resume_args}
    done = subprocess.run(
        [sys.executable, "train.py", *RELAUNCH],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "unrecognized arguments" in done.stderr


def test_only_the_relaunchs_arguments_are_taken_a_typo_still_fails(tmp_path: Path) -> None:
    done = run_script(tmp_path, "args = parser.parse_args()\n", ["--stepz", "3", *RELAUNCH], RELAUNCH)
    assert done.returncode == 2 and "unrecognized arguments: --stepz 3" in done.stderr
    assert "--start-step" not in done.stderr


def test_a_parser_given_its_own_list_is_left_alone(tmp_path: Path) -> None:
    body = """
    parser.parse_args(["--steps", "3", "--start-step", "200"])
    """
    done = run_script(tmp_path, body, RELAUNCH, RELAUNCH)
    assert done.returncode == 2 and "unrecognized arguments: --start-step 200" in done.stderr


def test_a_script_that_would_start_over_is_stopped_before_its_first_announcement(tmp_path: Path) -> None:
    body = """
    args = parser.parse_args()
    print("parsed", flush=True)
    arena.progress(1, 300)
    print("trained from step 1", flush=True)
    """
    done = run_script(tmp_path, body, RELAUNCH, RELAUNCH)
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == ["parsed"], "nothing announced, nothing trained"
    assert "would start over its checkpoints" in done.stderr and "--resume --start-step 200" in done.stderr


def test_a_script_that_would_start_over_never_saves_over_its_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "ckpt.pt").write_bytes(b"the checkpoint of step 200")
    body = """
    args = parser.parse_args()
    arena.save({"step": 1}, "ckpt.pt", 1)
    """
    done = run_script(tmp_path, body, RELAUNCH, RELAUNCH)
    assert done.returncode == 3, done.stderr
    assert (tmp_path / "ckpt.pt").read_bytes() == b"the checkpoint of step 200"
    left = sorted(path.name for path in tmp_path.iterdir() if path.name != "__pycache__")
    assert left == ["arena_trainer.py", "ckpt.pt", "train.py"], "no temporary either"


def test_a_path_resume_read_after_the_parser_is_a_resume_too(tmp_path: Path) -> None:
    relaunch = ["--resume-path", "checkpoints/step-200"]
    body = """
    args = parser.parse_args()
    print("path", arena.resume_path())
    arena.progress(201, 300)
    """
    done = run_script(tmp_path, body, relaunch, relaunch)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "path checkpoints/step-200"


# -- the agent names what it appended ----------------------------------------------------------


def test_the_agent_names_the_resume_arguments_it_appended() -> None:
    job = ["/usr/bin/python3", "train.py", "--steps", "300"]
    argv = trainer_argv(job, ["--resume", "--start-step", "{step}"], 200)
    assert json.loads(resume_env(argv, job)[RESUME_ARGS_VARIABLE]) == RELAUNCH
    assert resume_env(trainer_argv(job, ["--resume", "--start-step", "{step}"], None), job) == {}
    assert resume_env(["other", "argv"], job) == {}


def test_an_interpreter_with_e_gets_its_stream_flags_and_the_same_names() -> None:
    job = ["py", "-3.10", "-E", "train.py"]
    argv = trainer_argv(job, ["--resume_from_checkpoint", "{path}"], 200, "out/checkpoint-200")
    assert json.loads(resume_env(argv, job)[RESUME_ARGS_VARIABLE]) == [
        "--resume_from_checkpoint",
        "out/checkpoint-200",
    ]


def test_a_fresh_launch_never_inherits_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(RESUME_ARGS_VARIABLE, json.dumps(RELAUNCH))
    assert RESUME_ARGS_VARIABLE not in trainer_env({}, "r1", "train", tmp_path / "STOP")


# -- end to end ---------------------------------------------------------------------------------


def last_checkpoint(root: Path) -> int | None:
    """The step of the newest checkpoint the run's state records (read from the file, not the server)."""
    for state in (root / ".aide" / "training" / "runs").glob("*/state.json"):
        with contextlib.suppress(OSError, ValueError):
            last = json.loads(state.read_text(encoding="utf-8")).get("lastCheckpoint")
            return last["step"] if isinstance(last, dict) else None
    return None


def strict_job() -> dict[str, Any]:
    return {
        "id": "strict",
        "name": "Strict parser",
        "kind": "train",
        "status": "ready",
        "command": "{python}",
        "script": "kit_strict_parser_trainer.py",
        "args": ["kit_strict_parser_trainer.py", "--steps", "40", "--hold-at", "15"],
        "resume": {"args": ["--resume", "--start-step", "{step}"]},
        "restart": {"maxRestarts": 2, "backoffSeconds": 0.2},
    }


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
async def test_kill_9_of_a_kit_trainer_with_a_strict_parser_is_relaunched_and_resumes(tmp_path: Path) -> None:
    """On main the relaunch exited at ``parse_args()`` (2, "unrecognized arguments") twice and the
    run ended crashed, its checkpoint at step 10 never resumed."""
    root = make_workspace(tmp_path / "ws", [strict_job()])
    shutil.copy(TRAINER, root / "kit_strict_parser_trainer.py")
    shutil.copy(KIT, root / "arena_trainer.py")
    client = await start_server(root)
    try:
        run = await client.call("arena/start", {"id": "strict"})
        await wait_for(lambda: (root / "holding").exists(), DEADLINE, "the trainer holding at step 15")
        await wait_for(lambda: last_checkpoint(root) == 10, DEADLINE, "the checkpoint of step 10 recorded")
        os.kill(run["pid"], signal.SIGKILL)
        final = await wait_status(client, run["runId"], "succeeded", "crashed", "failed", timeout=DEADLINE)
        texts = [line["text"] for line in await all_logs(client, run["runId"])]
        assert final["status"] == "succeeded" and final["restarts"] == 1, texts[-15:]
        starts = [text for text in texts if text.startswith("starting ")]
        assert starts[-1].endswith("--resume --start-step 10"), starts
        steps = [json.loads(t[7:])["step"] for t in texts if t.startswith('@arena {"event": "progress"')]
        assert steps[steps.index(15) + 1 :] == list(range(11, 41)), "resumed from step 10's checkpoint"
    finally:
        await stop_server(client)
