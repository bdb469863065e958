"""The seed's manifest shapes (contract 7.3): AR114, stages, approval, roots, the Store stub, AR110."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from arena_ls.agent.trainer_start import trainer_argv
from arena_ls.manifest import load_manifest_text
from arena_ls.manifest.loader import ManifestResult
from arena_ls.protocol.jobs import stage_infos

SEED_ENTRY = {
    "id": "pretrain",
    "name": "Continue pretraining",
    "command": "py",
    "args": ["-3.10", "-E", "E:\\train\\train.py", "--resume", "--start-step", "<step>"],
    "status": "approval-required",
}


def load(root: Path, document: dict[str, Any] | str) -> ManifestResult:
    text = document if isinstance(document, str) else json.dumps(document, indent=2)
    return load_manifest_text(text, root / "manifest.json", root)


def diags(result: ManifestResult, code: str) -> list[Any]:
    return [d for d in result.diagnostics if d.code == code]


def apply_fix(text: str, diagnostic: Any) -> str:
    """Apply a diagnostic's quick fix (its wire edits), last first, as an editor would."""
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    edits = diagnostic.data["fix"]["edits"]

    def at(position: dict[str, int]) -> int:
        return offsets[position["line"]] + position["character"]

    for edit in sorted(edits, key=lambda e: at(e["range"]["start"]), reverse=True):
        text = text[: at(edit["range"]["start"])] + edit["newText"] + text[at(edit["range"]["end"]) :]
    return text


def trainer_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "outside" / "train"
    folder.mkdir(parents=True)
    (folder / "train.py").write_text("print('hi')\n")
    return folder


@pytest.mark.parametrize(
    "args",
    [
        ["-3.10", "-E", "E:\\train\\train.py", "--resume", "--start-step", "<step>"],
        ["train.py", "--resume"],
        ["train.py", "--start-step=100"],
        ["-u", "TRAIN.PY", "--from", "<step>"],
    ],
)
def test_a_resumable_trainer_written_as_a_task_is_ar114(tmp_path: Path, args: list[str]) -> None:
    for kind in ({}, {"kind": "task"}):
        job = {"id": "pretrain", "command": "py", "args": args, **kind}
        result = load(tmp_path, {"version": 1, "jobs": [job]})
        [ar114] = diags(result, "AR114")
        assert ar114.severity == "warning" and "task" in ar114.message
        assert ar114.data["fix"]["title"].startswith("Make it a train job")


@pytest.mark.parametrize(
    "job",
    [
        {"id": "a", "command": "npm", "args": ["run", "veritas", "--resume"]},
        {"id": "b", "command": "py", "args": ["train.py", "--epochs", "3"]},
        {"id": "c", "command": "py", "kind": "train", "args": ["train.py"], "resume": {"args": ["<step>"]}},
    ],
)
def test_ar114_does_not_fire_without_a_script_and_resume_args_or_on_a_train_job(
    tmp_path: Path, job: dict[str, Any]
) -> None:
    assert not diags(load(tmp_path, {"version": 1, "jobs": [job]}), "AR114")


def test_the_quick_fix_makes_the_seed_entry_a_train_job_with_its_resume_args(tmp_path: Path) -> None:
    folder = trainer_folder(tmp_path)
    entry = {
        **SEED_ENTRY,
        "args": ["-3.10", "-E", str(folder / "train.py"), "--resume", "--start-step", "<step>"],
    }
    text = json.dumps({"version": 1, "roots": [str(folder)], "jobs": [entry]}, indent=2)
    [ar114] = diags(load(tmp_path, text), "AR114")
    fixed_text = apply_fix(text, ar114)
    fixed = load(tmp_path, fixed_text)
    assert not fixed.errors and not diags(fixed, "AR114"), fixed.diagnostics
    job = fixed.jobs["pretrain"]
    assert job.kind == "train" and job.status == "approval-required" and job.name == "Continue pretraining"
    assert job.args == ("-3.10", "-E", str(folder / "train.py"))
    assert job.resume_args == ("--resume", "--start-step", "{step}")
    assert job.script == str(folder / "train.py")
    assert trainer_argv(job.argv([]), job.resume_args, 500) == [
        "py", "-3.10", "-E", "-u", "-X", "utf8", str(folder / "train.py"), "--resume", "--start-step", "500"
    ]  # fmt: skip
    json.loads(fixed_text)  # still JSON


def test_the_fix_adds_a_step_where_the_entry_had_only_resume(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    text = json.dumps(
        {"version": 1, "jobs": [{"id": "t", "command": "{python}", "args": ["train.py", "--resume"]}]}
    )
    [ar114] = diags(load(tmp_path, text), "AR114")
    fixed = load(tmp_path, apply_fix(text, ar114))
    assert fixed.jobs["t"].resume_args == ("--resume", "--start-step", "{step}")
    assert not fixed.errors


def test_seed_step_in_resume_args_means_step(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    job = {"id": "t", "command": "{python}", "kind": "train", "args": ["train.py"],
           "resume": {"args": ["--resume", "--start-step", "<step>"]}}  # fmt: skip
    result = load(tmp_path, {"version": 1, "jobs": [job]})
    assert not diags(result, "AR106") and not result.errors
    loaded = result.jobs["t"]
    assert trainer_argv(["py", "train.py"], loaded.resume_args, 42)[-1] == "42"


def test_stages_are_listed_blocked_with_ar115_and_its_fix_makes_a_job(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    document = {
        "version": 1,
        "jobs": [{"id": "verify-release", "command": "npm", "args": ["run", "veritas"]}],
        "stages": [
            {"id": "pretrain", "status": "approval-required"},
            {"id": "posttrain", "name": "Post-train"},
        ],
    }
    text = json.dumps(document, indent=2)
    result = load(tmp_path, text)
    assert not any("unknown top-level" in d.message for d in result.diagnostics)
    infos = stage_infos(result)
    assert [(i["id"], i["status"], i["runnable"]) for i in infos] == [
        ("pretrain", "stage", False),
        ("posttrain", "stage", False),
    ]
    assert infos[1]["name"] == "Post-train"
    assert all(
        i["blockedBy"][0]["code"] == "AR115" and "no command" in i["blockedBy"][0]["message"] for i in infos
    )
    ar115 = diags(result, "AR115")
    assert [d.severity for d in ar115] == ["information", "information"]
    fixed = load(tmp_path, apply_fix(text, ar115[0]))
    assert "pretrain" in fixed.jobs and fixed.jobs["pretrain"].kind == "train"
    assert [s.id for s in fixed.stages] == ["posttrain"] and not fixed.errors


def test_stages_as_an_object_and_a_fix_into_empty_jobs(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    text = '{"version": 1, "jobs": [], "stages": {"pretrain": {"status": "approval-required"}}}'
    result = load(tmp_path, text)
    [ar115] = diags(result, "AR115")
    fixed = load(tmp_path, apply_fix(text, ar115))
    assert list(fixed.jobs) == ["pretrain"] and not fixed.stages


def test_bad_stages_and_approval_are_reported(tmp_path: Path) -> None:
    result = load(tmp_path, {"version": 1, "jobs": [], "stages": 3, "approval": "sometimes"})
    messages = [d.message for d in diags(result, "AR102")]
    assert any("`stages`" in m for m in messages) and any("`approval`" in m for m in messages)


def test_approval_always_makes_every_start_need_approval(tmp_path: Path) -> None:
    jobs = [
        {"id": "r", "command": "npm", "args": ["run", "x"], "status": "ready"},
        {"id": "d", "command": "npm", "status": "disabled"},
    ]
    assert load(tmp_path, {"version": 1, "jobs": jobs}).jobs["r"].status == "ready"
    result = load(tmp_path, {"version": 1, "approval": "always", "jobs": jobs})
    assert result.approval == "always"
    assert result.jobs["r"].status == "approval-required" and result.jobs["d"].status == "disabled"


def test_roots_allow_script_cwd_and_arguments_there_and_nothing_else(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    folder = trainer_folder(tmp_path)
    (folder / "data.bin").write_text("x")
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.py").write_text("print('hi')\n")
    job = {"id": "t", "command": "{python}", "kind": "train", "cwd": str(folder),
           "args": ["train.py", "data.bin"], "resume": {"args": ["--start-step", "{step}"]}}  # fmt: skip
    allowed = load(workspace, {"version": 1, "roots": [str(folder)], "jobs": [job]})
    assert not allowed.errors, allowed.errors
    assert allowed.roots == (folder.resolve(),) and allowed.allowed_roots == (
        workspace.resolve(),
        folder.resolve(),
    )
    refused = load(workspace, {"version": 1, "jobs": [job]})
    assert [d.code for d in refused.errors] == ["AR110"]
    elsewhere = {**job, "cwd": str(other)}
    assert "AR110" in {
        d.code for d in load(workspace, {"version": 1, "roots": [str(folder)], "jobs": [elsewhere]}).errors
    }
    beside = {**job, "args": ["train.py", str(other / "train.py")]}
    assert "AR110" in {
        d.code for d in load(workspace, {"version": 1, "roots": [str(folder)], "jobs": [beside]}).errors
    }


def test_a_root_relative_to_the_workspace_and_one_that_is_not_a_folder(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    folder = trainer_folder(tmp_path)
    result = load(workspace, {"version": 1, "roots": ["../outside/train", "../nowhere", 5], "jobs": []})
    assert result.roots == ()  # a wrong type anywhere: the list is refused
    result = load(workspace, {"version": 1, "roots": ["../outside/train", "../nowhere"], "jobs": []})
    assert result.roots == (folder.resolve(),)
    [missing] = diags(result, "AR107")
    assert missing.severity == "warning" and "nowhere" in missing.message


def test_a_root_that_is_a_link_counts_where_it_leads(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    folder = trainer_folder(tmp_path)
    (tmp_path / "link").symlink_to(folder)
    job = {"id": "t", "command": "{python}", "kind": "train", "args": [str(folder / "train.py")],
           "resume": {"args": ["{step}"]}}  # fmt: skip
    assert not load(workspace, {"version": 1, "roots": [str(tmp_path / "link")], "jobs": [job]}).errors


def test_a_command_path_outside_the_workspace_and_roots_is_ar110(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "bin").mkdir(parents=True)
    folder = trainer_folder(tmp_path)
    (folder / "tool").write_text("#!/bin/sh\n")
    cases = {
        str(tmp_path / "elsewhere" / "tool"): True,
        str(folder / "tool"): False,
        "./bin/tool": False,
        "../outside/train/tool": False,
        "npm": False,  # a bare name: looked up on PATH
        sys.executable: False,  # the server's own interpreter
        "{python}": False,
    }
    for command, fires in cases.items():
        job = {"id": "t", "command": command, "args": ["run"], "status": "ready"}
        result = load(workspace, {"version": 1, "roots": [str(folder)], "jobs": [job]})
        assert bool(diags(result, "AR110")) is fires, (command, result.diagnostics)
    without_roots = load(workspace, {"version": 1, "jobs": [{"id": "t", "command": str(folder / "tool")}]})
    [ar110] = diags(without_roots, "AR110")
    assert "`command`" in ar110.message and ar110.span.line > 0


@pytest.mark.parametrize(
    ("command", "fires"),
    [
        ("C:\\Users\\Grey_\\AppData\\Local\\Microsoft\\WindowsApps\\python.exe", True),
        ("c:/users/grey_/appdata/local/microsoft/windowsapps/python3.exe", True),
        (
            "C:\\Users\\g\\AppData\\Local\\Microsoft\\WINDOWSAPPS\\PythonSoftwareFoundation.Python.3.10_x\\python3.10.exe",
            True,
        ),
        ("E:\\Python310\\python.exe", False),
        ("C:\\WindowsAppsTools\\python.exe", False),
    ],
)
def test_the_store_stub_is_ar104(tmp_path: Path, command: str, fires: bool) -> None:
    result = load(tmp_path, {"version": 1, "jobs": [{"id": "t", "command": command, "status": "ready"}]})
    ar104 = diags(result, "AR104")
    assert bool(ar104) is fires
    if fires:
        assert (
            "Microsoft Store" in ar104[0].message
            and ar104[0].data["fix"]["edits"][0]["newText"] == '"{python}"'
        )
