"""``arena init [SCRIPT]`` in a terminal: creates the manifest when there is none, adds a
trainer's job keeping the rest of the file, never overwrites what it cannot extend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_ls.client.cli import main

HF = (
    "from transformers import HfArgumentParser, Trainer, TrainingArguments\n"
    "(args,) = HfArgumentParser(TrainingArguments).parse_args_into_dataclasses()\n"
    "trainer = Trainer(model=None, args=args)\n"
    "trainer.train(resume_from_checkpoint=args.resume_from_checkpoint)\n"
)


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "finetune.py").write_text(HF)
    return tmp_path


def manifest_of(root: Path) -> Path:
    return root / "training" / "manifest.json"


def test_init_without_a_script_creates_an_empty_manifest_once(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    assert json.loads(manifest_of(workspace).read_text()) == {"version": 1, "jobs": []}
    manifest_of(workspace).write_text('{"version": 1, "jobs": [], "mine": true}')
    assert main(["init"]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert json.loads(manifest_of(workspace).read_text())["mine"] is True


def test_init_adds_the_script_with_its_frameworks_resume(
    workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "finetune.py"]) == 0
    jobs = json.loads(manifest_of(workspace).read_text())["jobs"]
    assert jobs[0]["id"] == "finetune"
    assert jobs[0]["resume"] == {"args": ["--resume_from_checkpoint", "{path}"]}
    assert "--resume_from_checkpoint {path}" in capsys.readouterr().out
    before = manifest_of(workspace).read_bytes()
    assert main(["init", "finetune.py"]) == 0, "a script already there changes nothing"
    assert manifest_of(workspace).read_bytes() == before


def test_init_keeps_the_rest_of_an_existing_manifest(workspace: Path) -> None:
    manifest = manifest_of(workspace)
    manifest.parent.mkdir()
    original = (
        '{\r\n  "version": 1,\r\n  "stages": ["keep me"],\r\n'
        '  "jobs": [\r\n    {"id": "other"}\r\n  ]\r\n}\r\n'
    )
    manifest.write_bytes(original.encode())
    (workspace / "sub").mkdir()
    (workspace / "sub" / "loop.py").write_text("import torch\nimport arena_trainer\n")
    assert main(["init", "sub/loop.py"]) == 0
    after = manifest.read_bytes().decode()
    document = json.loads(after)
    assert document["stages"] == ["keep me"]
    assert [job["id"] for job in document["jobs"]] == ["other", "loop"]
    assert document["jobs"][1]["script"] == "sub/loop.py"
    assert after.startswith(original[: original.index('{"id": "other"}') + len('{"id": "other"}')])
    assert "\n" not in after.replace("\r\n", "")


def test_init_leaves_a_broken_manifest_alone(workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = manifest_of(workspace)
    manifest.parent.mkdir()
    manifest.write_text('{"version": 1, "jobs": [')
    assert main(["init", "finetune.py"]) == 1
    assert "left as it is" in capsys.readouterr().err
    assert manifest.read_text() == '{"version": 1, "jobs": ['
    assert [p.name for p in manifest.parent.iterdir()] == ["manifest.json"], "no temporary file left"


@pytest.mark.parametrize("script", ["missing.py", "notes.txt", "../outside.py"])
def test_init_refuses_what_is_no_script_of_the_workspace(
    workspace: Path, script: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (workspace / "notes.txt").write_text("x")
    (workspace.parent / "outside.py").write_text("import torch\n")
    assert main(["init", script]) == 2
    assert capsys.readouterr().err.startswith("arena init: ")
    assert not manifest_of(workspace).exists()
