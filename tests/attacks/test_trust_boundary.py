"""The manifest is the trust boundary: what it names must stay in the workspace (AR110, AR113),
links out of the workspace are reported and refused, and a task's words never make it an OOM."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from arena_ls.agent.failure import classify
from arena_ls.manifest import load_manifest
from tests.helpers.lsp import make_workspace, start_server, stop_server, wait_status

AR001_MESSAGE = (
    "train.py:12: AR001 no OOM-retry wrapper: no try around the training step whose handler catches "
    'torch.cuda.OutOfMemoryError / torch.OutOfMemoryError or a RuntimeError checked for "out of memory"'
)


def manifest(root: Path, jobs: list[dict[str, Any]]) -> Path:
    (root / "training").mkdir(parents=True, exist_ok=True)
    path = root / "training" / "manifest.json"
    path.write_text(json.dumps({"version": 1, "jobs": jobs}))
    return path


def codes(root: Path, jobs: list[dict[str, Any]], **kwargs: Any) -> list[tuple[str, str]]:
    result = load_manifest(manifest(root, jobs), root, **kwargs)
    return [(d.code, d.message) for d in result.diagnostics if d.code != "AR109"]


def task(**fields: Any) -> dict[str, Any]:
    return {"id": "t", "command": "{python}", "status": "ready", **fields}


@pytest.mark.parametrize("kind", ["task", "train"])
def test_ar110_covers_arguments_that_are_existing_paths_outside(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "run.py").write_text("print(1)\n")
    outside = tmp_path / "evil.py"
    outside.write_text("print('evil')\n")
    extra = {"resume": {"args": ["--start-step", "{step}"]}, "script": "run.py"} if kind == "train" else {}
    found = codes(
        root, [task(kind=kind, args=["run.py", str(outside), "--steps", "5", "../evil.py"], **extra)]
    )
    ar110 = [message for code, message in found if code == "AR110"]
    assert len(ar110) == 2, found
    assert codes(root, [task(kind=kind, args=["run.py", "--steps", "5", "missing.txt"], **extra)]) == []


def test_ar110_follows_a_script_link_out_of_the_workspace(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "real.py"
    outside.write_text("print(1)\n")
    (root / "train.py").symlink_to(outside)
    found = codes(root, [task(script="train.py", args=["train.py"])])
    assert [code for code, _ in found] == ["AR110", "AR110"], found


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHOME"])
def test_ar113_warns_on_loader_variables(tmp_path: Path, name: str) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    result = load_manifest(manifest(root, [task(env={name: "/tmp/x", "OMP_NUM_THREADS": "2"})]), root)
    found = [(d.code, d.severity) for d in result.diagnostics if d.code != "AR109"]
    assert found == [("AR113", "warning")]
    assert "t" in result.jobs  # a warning: the job still loads


def test_a_manifest_link_leaving_the_workspace_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "training").mkdir(parents=True)
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps({"version": 1, "jobs": [task()]}))
    (root / "training" / "manifest.json").symlink_to(outside)
    result = load_manifest(root / "training" / "manifest.json", root)
    assert result.fatal and result.jobs == {}
    assert [d.code for d in result.diagnostics] == ["AR110"]


def test_a_manifest_configured_outside_by_the_user_is_read(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    elsewhere = manifest(tmp_path / "shared", [task()])
    assert not load_manifest(elsewhere, root).fatal


def test_a_state_folder_link_leaving_the_workspace_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    (root / ".aide").mkdir()
    (root / ".aide" / "training").symlink_to(tmp_path / "outside")
    result = load_manifest(manifest(root, [task()]), root, state_dir=root / ".aide" / "training")
    assert result.fatal and any(d.code == "AR110" and "state folder" in d.message for d in result.diagnostics)


async def test_the_server_refuses_to_start_with_a_linked_state_folder(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [task(id="hello", args=["-c", "print('hi')"])])
    (tmp_path / "outside").mkdir()
    (root / ".aide").mkdir()
    (root / ".aide" / "training").symlink_to(tmp_path / "outside")
    client = await start_server(root)
    try:
        error = await client.call_error("arena/start", {"id": "hello"})
        assert error.code == 1006
        assert any(d["code"] == "AR110" for d in (error.data or {})["diagnostics"])
        assert list((tmp_path / "outside").iterdir()) == []
    finally:
        await stop_server(client)


def test_a_task_that_prints_the_word_is_an_error_not_an_oom() -> None:
    failure = classify(exit_code=1, signal_name=None, tail=[AR001_MESSAGE], nan_evidence=None, kind="task")
    assert failure is not None and failure.kind == "error"
    failure = classify(exit_code=1, signal_name=None, tail=[AR001_MESSAGE], nan_evidence=None, kind="train")
    assert failure is not None and failure.kind == "error"


def test_a_train_job_dying_of_oom_is_an_oom() -> None:
    tail = [
        "step 3",
        "Traceback (most recent call last):",
        '  File "t.py"',
        "torch.OutOfMemoryError: CUDA out of memory.",
    ]
    failure = classify(exit_code=1, signal_name=None, tail=tail, nan_evidence=None, kind="train")
    assert failure is not None and failure.kind == "oom"


def test_only_lines_near_the_end_are_oom_evidence() -> None:
    tail = [
        "RuntimeError: CUDA out of memory (recovered, retrying)",
        *[f"step {i}" for i in range(100)],
        "boom",
    ]
    failure = classify(exit_code=1, signal_name=None, tail=tail, nan_evidence=None, kind="train")
    assert failure is not None and (failure.kind, failure.evidence) == ("error", "boom")


async def test_a_task_printing_ar001_crashes_as_error(tmp_path: Path) -> None:
    code = f"import sys; print({AR001_MESSAGE!r}); sys.exit(1)"
    root = make_workspace(tmp_path / "ws", [task(id="check", args=["-c", code])])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "check"})
        final = await wait_status(client, info["runId"], "crashed")
        assert final["failure"]["kind"] == "error", final
    finally:
        await stop_server(client)


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_links_inside_the_workspace_are_fine(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "train.py").write_text("print(1)\n")
    os.symlink(root / "src" / "train.py", root / "train.py")
    assert codes(root, [task(script="train.py", args=["train.py"])]) == []
