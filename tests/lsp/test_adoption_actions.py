"""The code actions of contract 8.1 through a real arena-ls: "Add arena-ls's callback", "Add the
trainer kit beside this script" and the source action "Add this trainer to the manifest"."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from tests.helpers.lsp import (
    RESUME,
    ArenaClient,
    poll_until,
    start_server,
    stop_server,
    wait_for,
    write_manifest,
)
from tests.lsp.test_gates_in_the_editor import apply, change_doc, codes, open_doc

HF_TRAINER = """\
from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

parser = HfArgumentParser(TrainingArguments)
(training_args,) = parser.parse_args_into_dataclasses()
model = AutoModelForCausalLM.from_pretrained("gpt2")
trainer = Trainer(
    model=model,
    args=training_args,
)
trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
"""
STAND_IN_KIT = '"""A stand-in for the trainer kit: the bytes the action must copy."""\r\nPROTOCOL = 1\n# é\n'


def job(script: str) -> dict[str, object]:
    return {
        "id": "lm",
        "kind": "train",
        "command": "{python}",
        "args": [script],
        "script": script,
        "status": "ready",
        "resume": RESUME,
    }


def installed_kit_bytes() -> bytes:
    """The kit the server finds: the project's own ``arena_trainer`` (installed with it as a
    top-level module, found before ``PYTHONPATH``'s stand-in by the editable install), else the
    stand-in."""
    spec = importlib.util.find_spec("arena_trainer")
    if spec is not None and spec.origin:
        return Path(spec.origin).read_bytes()
    return STAND_IN_KIT.encode("utf-8")


@pytest.fixture
def kit_dir(tmp_path: Path) -> Path:
    """Where the server finds ``arena_trainer`` (first on its PYTHONPATH): a stand-in whose bytes we know."""
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "arena_trainer.py").write_bytes(STAND_IN_KIT.encode("utf-8"))
    return folder


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "train.py").write_text(HF_TRAINER)
    write_manifest(root, [job("train.py")])
    return root


@pytest.fixture(params=["visual-studio-code", "neovim"])
async def client(
    request: pytest.FixtureRequest, workspace: Path, kit_dir: Path
) -> AsyncIterator[ArenaClient]:
    lsp = await start_server(
        workspace,
        capabilities=request.param,
        init_options={"device": {"fp32Only": True}},
        env={"PYTHONPATH": str(kit_dir)},
    )
    yield lsp
    await stop_server(lsp)


async def actions(
    client: ArenaClient, uri: str, diagnostics: list[types.Diagnostic], only: list[str] | None = None
) -> list[types.CodeAction]:
    whole = types.Range(start=types.Position(0, 0), end=types.Position(0, 0))
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diagnostics[0].range if diagnostics else whole,
            context=types.CodeActionContext(diagnostics=diagnostics, only=only),
        )
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


def apply_document_changes(edit: types.WorkspaceEdit | None) -> None:
    """Apply a workspace edit's ``documentChanges`` to the files, as an editor would."""
    assert edit is not None and edit.document_changes
    for change in edit.document_changes:
        if isinstance(change, types.CreateFile):
            path = Path(types_path(change.uri))
            assert change.options is not None and change.options.overwrite is not True
            if not path.exists():
                path.write_text("", encoding="utf-8")
        else:
            assert isinstance(change, types.TextDocumentEdit)
            path = Path(types_path(change.text_document.uri))
            text = path.read_bytes().decode("utf-8")
            edits = [e for e in change.edits if isinstance(e, types.TextEdit)]
            path.write_bytes(apply(text, edits).encode("utf-8"))


def is_one_insertion(before: str, after: str) -> bool:
    """``after`` is ``before`` with one piece of text inserted somewhere."""
    common = 0
    while common < len(before) and before[common] == after[common]:
        common += 1
    return len(after) > len(before) and after.endswith(before[common:])


def types_path(uri: str) -> str:
    from arena_ls.uris import uri_to_path

    path = uri_to_path(uri)
    assert path is not None
    return str(path)


async def test_the_callback_fix_clears_the_framework_findings(client: ArenaClient, workspace: Path) -> None:
    uri = open_doc(client, workspace / "train.py", HF_TRAINER)
    await wait_for(lambda: {"AR001", "AR002", "AR009"} <= codes(client, uri), what="the framework findings")
    ar001 = next(d for d in client.diagnostics[uri] if d.code == "AR001")
    found = await actions(client, uri, [ar001])
    fix = next(a for a in found if a.title == "Add arena-ls's callback")
    assert fix.kind == types.CodeActionKind.QuickFix
    assert fix.edit is not None and fix.edit.changes is not None
    text = apply(HF_TRAINER, list(fix.edit.changes[uri]))
    assert "from arena_trainer import HFCallback\n" in text
    assert "    args=training_args,\n    callbacks=[HFCallback()],\n)" in text
    change_doc(client, uri, text, 2)
    await wait_for(lambda: not {"AR001", "AR002", "AR009"} & codes(client, uri), what="the findings cleared")


async def test_the_kit_is_copied_beside_the_script_and_never_over_another_file(
    client: ArenaClient, workspace: Path
) -> None:
    uri = open_doc(client, workspace / "train.py", HF_TRAINER)
    await wait_for(lambda: "AR001" in codes(client, uri), what="gate findings")
    findings = list(client.diagnostics[uri])
    kit = next(
        a for a in await actions(client, uri, findings) if a.title == "Add the trainer kit beside this script"
    )
    assert kit.disabled is None
    beside = workspace / "arena_trainer.py"
    apply_document_changes(kit.edit)
    assert beside.read_bytes() == installed_kit_bytes(), "the kit's own bytes, as the server finds it"
    titles = [a.title for a in await actions(client, uri, findings)]
    assert "Add the trainer kit beside this script" not in titles, "not offered once it is there"

    beside.write_text("# my own arena_trainer\n")
    offered = [
        a for a in await actions(client, uri, findings) if a.title == "Add the trainer kit beside this script"
    ]
    assert len(offered) == 1 and offered[0].edit is None
    assert offered[0].disabled is not None and "not overwritten" in offered[0].disabled.reason
    assert beside.read_text() == "# my own arena_trainer\n"


async def test_a_script_is_added_to_the_manifest_with_its_frameworks_resume(
    client: ArenaClient, workspace: Path
) -> None:
    manifest = workspace / "training" / "manifest.json"
    before = manifest.read_text()
    script = workspace / "finetune.py"
    script.write_text(HF_TRAINER)
    uri = open_doc(client, script, HF_TRAINER)
    quick_only = await actions(client, uri, [], only=[types.CodeActionKind.QuickFix])
    assert all(a.title != "Add this trainer to the manifest" for a in quick_only)
    found = await actions(client, uri, [], only=[types.CodeActionKind.Source])
    add = next(a for a in found if a.title == "Add this trainer to the manifest")
    assert add.kind == "source.arena.addToManifest"
    apply_document_changes(add.edit)
    after = manifest.read_text()
    jobs = json.loads(after)["jobs"]
    assert [j["id"] for j in jobs] == ["lm", "finetune"]
    assert jobs[1]["kind"] == "train" and jobs[1]["args"] == ["finetune.py"]
    assert jobs[1]["resume"] == {"args": ["--resume_from_checkpoint", "{path}"]}
    assert is_one_insertion(before, after), "the rest of the manifest is kept, byte for byte"

    again = await actions(client, uri, [], only=[types.CodeActionKind.Source])
    listed = next(a for a in again if a.title == "Add this trainer to the manifest")
    assert listed.edit is None and listed.disabled is not None and "job finetune" in listed.disabled.reason


async def test_a_workspace_with_no_manifest_gets_one(client: ArenaClient, workspace: Path) -> None:
    manifest = workspace / "training" / "manifest.json"
    manifest.unlink()
    script = workspace / "loop.py"
    source = "import torch\nimport arena_trainer\n\nstart = arena_trainer.resume_step() or 0\n"
    script.write_text(source)
    uri = open_doc(client, script, source)
    found = await actions(client, uri, [], only=["source.arena.addToManifest"])
    add = next(a for a in found if a.title == "Add this trainer to the manifest")
    apply_document_changes(add.edit)
    document = json.loads(manifest.read_text())
    assert document["version"] == 1
    assert document["jobs"][0]["resume"] == {"args": ["--resume", "--start-step", "{step}"]}
    assert document["jobs"][0]["script"] == "loop.py"


async def test_the_source_action_is_worked_out_when_asked_not_on_every_cursor_move(
    client: ArenaClient, workspace: Path
) -> None:
    script = workspace / "finetune.py"
    script.write_text(HF_TRAINER)
    uri = open_doc(client, script, HF_TRAINER)
    whole = types.Range(start=types.Position(0, 0), end=types.Position(0, 0))

    async def titles(trigger: types.CodeActionTriggerKind) -> list[str]:
        result = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=whole,
                context=types.CodeActionContext(diagnostics=[], trigger_kind=trigger),
            )
        )
        return [a.title for a in result or [] if isinstance(a, types.CodeAction)]

    assert "Add this trainer to the manifest" not in await titles(types.CodeActionTriggerKind.Automatic)
    assert "Add this trainer to the manifest" in await titles(types.CodeActionTriggerKind.Invoked)


async def test_a_finding_sent_back_as_status_lists_it_gets_its_fix_from_the_file(
    client: ArenaClient, workspace: Path
) -> None:
    """The AIDE daemon never opens the trainer: it sends back ``JobInfo.blockedBy`` (``{code, message,
    uri, range}``, no ``data``), and the fix comes from a lint of the file as it is on disk."""

    found: list[dict[str, Any]] = []

    async def blocked() -> bool:
        status = await client.call("arena/status", {})
        found[:] = next(j for j in status["jobs"] if j["id"] == "lm")["blockedBy"]
        return any(d["code"] == "AR001" for d in found)

    await poll_until(blocked, what="AR001 in the job's blockedBy")
    ar001 = next(d for d in found if d["code"] == "AR001")
    assert "data" not in ar001 and "fix" not in ar001
    start, end = ar001["range"]["start"], ar001["range"]["end"]
    sent = types.Diagnostic(
        range=types.Range(
            start=types.Position(start["line"], start["character"]),
            end=types.Position(end["line"], end["character"]),
        ),
        message=str(ar001["message"]),
        code="AR001",
        source="arena",
    )
    uri = str(ar001["uri"])
    fix = next(a for a in await actions(client, uri, [sent]) if a.title == "Add arena-ls's callback")
    assert fix.edit is not None and fix.edit.changes is not None
    text = apply(HF_TRAINER, list(fix.edit.changes[uri]))
    assert "    callbacks=[HFCallback()],\n)" in text

    (workspace / "train.py").write_text("# a line on top\n" + HF_TRAINER)
    moved = await actions(client, uri, [sent])
    assert "Add arena-ls's callback" not in [a.title for a in moved], "the finding is no longer on that line"
