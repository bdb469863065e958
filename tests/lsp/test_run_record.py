"""The run record (contract 8.3): real git repositories in ``tmp_path`` (clean, dirty, none, no
git at all), read over the wire from ``RunInfo.record``, and the record's parts on their own."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from arena_ls.lifecycle import runrecord
from arena_ls.lifecycle.runrecord import git_record, python_record, run_record, settings_record
from arena_ls.settings import parse_settings
from tests.helpers.lsp import job, make_workspace, start_server, stop_server, wait_status

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]


def git(root: Path, *words: str) -> str:
    done = subprocess.run([*GIT, *words], cwd=root, capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()


def committed_workspace(root: Path) -> Path:
    """A workspace that is a repository with one commit of everything in it."""
    make_workspace(root, [job("quick", "--steps", "3", "--interval", "0.01")])
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return root


async def record_of_a_run(root: Path, **server: Any) -> dict[str, Any]:
    client = await start_server(root, **server)
    try:
        run = await client.call("arena/start", {"id": "quick"})
        ended = await wait_status(client, run["runId"], "succeeded")
        status = await client.call("arena/status", {})
        listed = next(r for r in status["runs"] if r["runId"] == run["runId"])
        assert listed["record"] == ended["record"] == run["record"]
        record: dict[str, Any] = run["record"]
        return record
    finally:
        await stop_server(client)


async def test_a_clean_repository_records_its_commit_and_not_dirty(tmp_path: Path) -> None:
    root = committed_workspace(tmp_path / "ws")
    record = await record_of_a_run(root)
    assert record["git"] == {"commit": git(root, "rev-parse", "HEAD"), "dirty": False, "diffSha256": None}
    assert record["python"] == {"path": sys.executable, "version": ".".join(map(str, sys.version_info[:3]))}
    assert record["argv"][0] == sys.executable and record["argv"][1:3] == ["fake_trainer.py", "--steps"]
    manifest = root / "training" / "manifest.json"
    assert record["manifestSha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert record["host"]
    settings = record["settings"]
    assert settings["watchdog.afterReboot"] == "ask" and settings["preflight.minFreeRamMb"] == 5120
    assert "clusters" not in settings


async def test_a_dirty_repository_records_dirty_and_its_diff(tmp_path: Path) -> None:
    root = committed_workspace(tmp_path / "ws")
    trainer = root / "fake_trainer.py"
    trainer.write_text(trainer.read_text(encoding="utf-8") + "\n# an edit not committed\n", encoding="utf-8")
    (root / "notes.txt").write_text("untracked files do not make a tree dirty\n", encoding="utf-8")
    diff = subprocess.run(
        [*GIT, "diff", "HEAD", "--binary"], cwd=root, capture_output=True, check=True
    ).stdout
    record = await record_of_a_run(root, init_options={"watchdog": {"afterReboot": "resume"}})
    assert record["git"]["commit"] == git(root, "rev-parse", "HEAD")
    assert record["git"]["dirty"] is True
    assert record["git"]["diffSha256"] == hashlib.sha256(diff).hexdigest()
    assert record["settings"]["watchdog.afterReboot"] == "resume"  # the settings that applied


async def test_a_workspace_that_is_no_repository_records_no_git(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3", "--interval", "0.01")])
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path)}  # tmp_path may sit inside a repository
    record = await record_of_a_run(root, env=env)
    assert record["git"] is None
    assert record["python"]["path"] == sys.executable


def test_a_repository_with_no_commit_yet_is_dirty_with_no_commit(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    assert git_record(tmp_path) == {"commit": None, "dirty": True, "diffSha256": None}


def test_without_git_the_record_has_no_git_and_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    git(tmp_path, "init", "-q")
    with caplog.at_level("INFO", logger=runrecord.__name__):
        assert git_record(tmp_path, git=str(tmp_path / "no-such-git")) is None
    assert "no git on this machine" in caplog.text


def test_a_git_that_does_not_answer_in_time_gives_no_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = tmp_path / "slow-git"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(runrecord, "GIT_TIMEOUT", 0.2)
    assert git_record(tmp_path, git=str(slow)) is None


def test_the_interpreter_version_is_known_without_running_it(tmp_path: Path) -> None:
    assert python_record(["py", "-3.10", "-E"]) == {"path": "py -3.10 -E", "version": "3.10"}
    assert python_record([sys.executable])["version"] == ".".join(map(str, sys.version_info[:3]))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.10.11\n")
    assert python_record([str(venv / "bin" / "python")])["version"] == "3.10.11"
    assert python_record([str(tmp_path / "python")])["version"] is None


def test_the_settings_record_is_plain_json_by_dotted_key() -> None:
    settings, _ = parse_settings({"gates": {"severity": {"AR010": "error"}}, "python": ["py", "-3.10"]})
    record = settings_record(settings)
    assert record["gates.severity"] == {"AR010": "error"}
    assert record["python"] == ["py", "-3.10"]
    assert "clusters" not in record


def test_a_manifest_that_cannot_be_read_has_no_hash(tmp_path: Path) -> None:
    record = run_record(
        root=tmp_path,
        python=[sys.executable],
        argv=["x"],
        manifest=tmp_path / "missing.json",
        settings=parse_settings({})[0],
    )
    assert record["manifestSha256"] is None and record["argv"] == ["x"]
    assert os.path.isabs(record["python"]["path"])
