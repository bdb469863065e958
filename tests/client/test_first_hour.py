"""What a new user meets in the terminal's first hour (issue 27): a missing or broken manifest
said as such, unknown job ids named with the known ones, and the trainer's ``@arena`` lines
hidden unless ``--raw``. Real ``arena`` processes and a real ``arena-ls``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from arena_ls.client.announcements import is_announcement
from tests.client.support import ARENA, WAIT, ArenaProcess, arena_env, one_line, run_arena, status_json
from tests.helpers.lsp import job, make_workspace

KNOWN = "quick, slow, deaf, needs-ok, off, train-slow, ckpt-train, exit3"


# -- a missing or broken manifest -------------------------------------------------------------


def test_status_of_a_workspace_without_manifest_says_it_is_missing(tmp_path: Path) -> None:
    """Regression: ``no jobs in the manifest`` and exit 0, as if the file were there and empty."""
    done = run_arena(tmp_path, "status")
    assert done.returncode == 1
    manifest = tmp_path.resolve() / "training" / "manifest.json"
    assert one_line(done.stderr) == (
        f'arena: there is no manifest: {manifest} does not exist (README: "Add your own job")'
    )


@pytest.mark.parametrize("args", [["status"], ["status", "--json"]])
def test_status_of_a_manifest_that_is_not_json_says_where(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "manifest.json").write_text('{"version": 1,\n  "jobs": [\n')
    done = run_arena(tmp_path, *args)
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "manifest.json is not valid JSON (line 3, column 1: Expecting value)" in line, line
    assert "no jobs in the manifest" not in done.stdout, "a broken manifest is not an empty one"


def test_status_of_a_broken_manifest_says_the_problem_before_the_tables(tmp_path: Path) -> None:
    """Regression (issue 38): the tables said "no jobs in the manifest" first, the JSON error last."""
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "manifest.json").write_text('{"version": 1, "jobs": [ {"id": "a",}')
    done = subprocess.run(  # one stream, as a terminal shows it: the order is the point
        [*ARENA, "status", "--root", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=arena_env(),
        cwd=tmp_path,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 1
    said = done.stdout
    assert "no jobs in the manifest" not in said
    assert said.index("is not valid JSON") < said.index("Jobs") < said.index("the manifest has a problem")


def test_status_of_a_manifest_that_does_not_load_names_its_error(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "manifest.json").write_text("[1, 2]")
    done = run_arena(tmp_path, "status")
    assert done.returncode == 1
    assert "does not load: AR102 line 1: " in one_line(done.stderr)


def test_status_of_an_empty_manifest_is_no_error(tmp_path: Path) -> None:
    make_workspace(tmp_path, [])
    done = run_arena(tmp_path, "status")
    assert done.returncode == 0, done.stderr
    assert "no jobs in the manifest" in done.stdout


def test_start_without_manifest_says_it_is_missing_not_invalid_json(tmp_path: Path) -> None:
    """Regression: a missing file was reported as AR101 (the code of "not valid JSON")."""
    done = run_arena(tmp_path, "start", "tiny-lm")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith("arena: refused (invalid-manifest): there is no manifest: ")
    assert "does not exist" in line and "JSON" not in line and "AR101" not in line


def test_start_with_a_manifest_that_is_not_json_says_where(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "manifest.json").write_text('{"version": 1, "jobs": [}')
    done = run_arena(tmp_path, "start", "tiny-lm")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.endswith(
        "does not load: AR101 line 1, column 25: not valid JSON: Expecting value; see `arena check`"
    ), line


# -- unknown job ids -------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["logs", "plot", "stop"])
def test_an_unknown_job_is_named_with_the_known_ones(workspace: Path, command: str) -> None:
    """Regression: ``job nope has no runs yet``, and ``arena stop nope`` said "not running", exit 0."""
    done = run_arena(workspace, command, "nope")
    assert done.returncode == 1, done.stdout
    assert one_line(done.stderr) == f"arena: no job 'nope' in the manifest; known jobs: {KNOWN}"


def test_a_known_job_without_runs_still_says_so(workspace: Path) -> None:
    assert one_line(run_arena(workspace, "logs", "quick").stderr) == "arena: job quick has no runs yet"
    stopped = run_arena(workspace, "stop", "quick")
    assert stopped.returncode == 0 and stopped.stdout.strip() == "job quick is not running"


def test_a_job_removed_from_the_manifest_keeps_its_logs(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("old", "--steps", "3", "--numbered")])
    started = run_arena(root, "start", "old", "--follow")
    assert started.returncode == 0, started.stderr
    make_workspace(root, [job("new", "--steps", "3")])
    logs = run_arena(root, "logs", "old")
    assert logs.returncode == 0, logs.stderr
    assert "numbered 3" in logs.stdout


# -- @arena lines ----------------------------------------------------------------------------


def announcements_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("@arena {")]


def test_logs_hide_the_trainers_announcements_unless_raw(workspace: Path) -> None:
    """Regression: three lines per step (progress, checkpoint, the trainer's own) in ``arena logs``."""
    started = run_arena(workspace, "start", "quick", "--follow")
    assert started.returncode == 0, started.stderr
    assert announcements_in(started.stdout) == [], "--follow hides them"
    assert "numbered 15" in started.stdout
    logs = run_arena(workspace, "logs", "quick")
    assert announcements_in(logs.stdout) == [] and "numbered 15" in logs.stdout
    raw = run_arena(workspace, "logs", "quick", "--raw")
    shown = announcements_in(raw.stdout)
    assert len(shown) == 15 + 3, "15 progress lines and 3 checkpoints, as logged"
    assert json.loads(shown[-1].removeprefix("@arena "))["event"] == "checkpoint"


def test_follow_raw_shows_every_line(workspace: Path) -> None:
    follow = ArenaProcess(workspace, "start", "quick", "--follow", "--raw")
    try:
        follow.wait_for_line(r'^@arena \{"event": "checkpoint", "step": 15')
        assert follow.wait() == 0
    finally:
        follow.close()
    assert status_json(workspace)["active"] is None


@pytest.mark.parametrize(
    ("text", "hidden"),
    [
        ('@arena {"event": "progress", "step": 1}', True),
        ('@arena {"event": "health", "step": 1, "gradNorm": 1.0}', True),
        ('@arena {"event": "progress", "step": 1', False),
        ("@arena not json", False),
        ('@arena ["event"]', False),
        ('@arena {"step": 1}', False),
        ('  @arena {"event": "progress"}', False),
        ("@arena " + "[" * 100_000, False),
    ],
)
def test_only_well_formed_announcements_are_hidden(text: str, hidden: bool) -> None:
    assert is_announcement({"stream": "stdout", "text": text}) is hidden
    assert not is_announcement({"stream": "stderr", "text": text}), "stderr is always shown"
