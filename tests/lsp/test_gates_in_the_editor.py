"""Gates as diagnostics through a real arena-ls: publish, clear, AR108, lenses, quick fixes, 1004."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from arena_ls.gates.registry import RULES
from tests.helpers.lsp import (
    REPO,
    RESUME,
    ArenaClient,
    judged_status,
    start_server,
    stop_server,
    wait_for,
    write_manifest,
)

GOOD = (REPO / "training" / "train.py").read_text()
BAD = GOOD.replace('"--resume"', '"--continue"').replace('"--start-step"', '"--begin-step"')


def train_job(**extra: Any) -> dict[str, Any]:
    return {
        "id": "lm",
        "name": "LM",
        "kind": "train",
        "command": "{python}",
        "args": ["train.py", "--steps", "5"],
        "script": "train.py",
        "status": "ready",
        "resume": RESUME,
        **extra,
    }


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "train.py").write_text(BAD)
    write_manifest(root, [train_job()])
    return root


@pytest.fixture(params=["visual-studio-code", "neovim"])
async def client(request: pytest.FixtureRequest, workspace: Path) -> AsyncIterator[ArenaClient]:
    lsp = await start_server(
        workspace, capabilities=request.param, init_options={"device": {"fp32Only": True}}
    )
    yield lsp
    await stop_server(lsp)


def open_doc(client: ArenaClient, path: Path, text: str) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    return uri


def change_doc(client: ArenaClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def codes(client: ArenaClient, uri: str) -> set[str]:
    return {str(d.code) for d in client.diagnostics.get(uri, [])}


def apply(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def offset(pos: types.Position) -> int:
        return offsets[pos.line] + pos.character

    for edit in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
    return text


async def actions_for(client: ArenaClient, uri: str, code: str) -> list[types.CodeAction]:
    diag = next(d for d in client.diagnostics[uri] if d.code == code)
    result = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diag.range,
            context=types.CodeActionContext(diagnostics=[diag]),
        )
    )
    return [a for a in result or [] if isinstance(a, types.CodeAction)]


async def lens_titles(client: ArenaClient, manifest_uri: str) -> list[str]:
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=manifest_uri))
    )
    return [lens.command.title for lens in lenses or [] if lens.command]


async def test_failing_trainer_diagnostics_clear_when_fixed(client: ArenaClient, workspace: Path) -> None:
    trainer = workspace / "train.py"
    manifest_uri = (workspace / "training" / "manifest.json").as_uri()
    uri = open_doc(client, trainer, BAD)
    await wait_for(lambda: {"AR007", "AR008"} <= codes(client, uri), what="gate diagnostics")
    diag = next(d for d in client.diagnostics[uri] if d.code == "AR007")
    assert diag.source == "arena" and diag.code_description and "rules.md#ar007" in diag.code_description.href
    await wait_for(lambda: "AR108" in codes(client, manifest_uri), what="AR108 on the manifest")
    ar108 = next(d for d in client.diagnostics[manifest_uri] if d.code == "AR108")
    assert ar108.related_information and ar108.related_information[0].location.uri == uri

    error = await client.call_error("arena/start", {"id": "lm"})
    assert (error.code, error.data["reason"]) == (1004, "gates-failed")
    assert {d["code"] for d in error.data["diagnostics"]} >= {"AR007", "AR008"}
    blocked = [t for t in await lens_titles(client, manifest_uri) if t.startswith("⛔ Blocked: AR00")]
    assert len(blocked) == 1 and blocked[0].endswith("(+1 more)"), blocked
    shown = await client.call(
        "workspace/executeCommand", types.ExecuteCommandParams("arena.showBlocked", [{"id": "lm"}])
    )
    assert {d["code"] for d in shown["blockedBy"]} == {"AR007", "AR008"}
    await wait_for(lambda: any("AR007" in m.message for m in client.messages), what="the blocked message")
    status = await client.call("arena/status", {})
    job = status["jobs"][0]
    assert job["runnable"] is False and {d["code"] for d in job["blockedBy"]} == {"AR007", "AR008"}

    change_doc(client, uri, GOOD, 2)
    await wait_for(lambda: uri in client.diagnostics and not codes(client, uri), what="diagnostics to clear")
    await wait_for(lambda: "AR108" not in codes(client, manifest_uri), what="AR108 to clear")
    trainer.write_text(GOOD)
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    dry = await client.call("arena/start", {"id": "lm", "dryRun": True})
    assert dry["gates"] == []
    assert any(t.startswith("▶ Run LM") for t in await lens_titles(client, manifest_uri))


async def test_every_job_gets_a_lens_naming_what_blocks_it(client: ArenaClient, workspace: Path) -> None:
    (workspace / "train.py").write_text(GOOD)
    write_manifest(
        workspace,
        [
            train_job(),
            train_job(id="twin", name="Twin A"),
            train_job(id="twin", name="Twin B"),
            train_job(id="bare", command="python"),
            train_job(id="no-resume", resume=None),
            train_job(id="ghost", args=["gone.py"], script="gone.py"),
        ],
    )
    manifest = workspace / "training" / "manifest.json"
    manifest_uri = manifest.as_uri()
    open_doc(client, manifest, manifest.read_text())
    await judged_status(client)  # lenses asked for before the verdict say "still checking"
    lenses = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=manifest_uri))
    )
    titles = [lens.command.title for lens in lenses or [] if lens.command]
    assert len(titles) == 6, titles
    assert titles[0] == "▶ Run LM"
    assert titles[1].startswith("⛔ Blocked: AR103 two jobs share the id `twin`") and titles[2] == titles[1]
    assert titles[3].startswith("⛔ Blocked: AR104 ")
    assert titles[4].startswith("⛔ Blocked: AR106 ")
    assert titles[5].startswith("⛔ Blocked: AR107 `script` 'gone.py' does not exist")
    lines = [lens.range.start.line for lens in lenses or []]
    assert lines == sorted(set(lines)), "each entry's lens on its own line"
    shown = await client.call(
        "workspace/executeCommand", types.ExecuteCommandParams("arena.showBlocked", [{"id": "bare"}])
    )
    assert [d["code"] for d in shown["blockedBy"]] == ["AR104"]


async def test_quick_fixes_make_the_rule_stop_firing(client: ArenaClient, workspace: Path) -> None:
    uri = open_doc(client, workspace / "train.py", BAD)
    await wait_for(lambda: {"AR007", "AR008"} <= codes(client, uri), what="gate diagnostics")
    text = BAD
    for code, version in (("AR007", 2), ("AR008", 3)):
        actions = await actions_for(client, uri, code)
        fix = next(a for a in actions if not a.title.startswith("Suppress"))
        assert fix.edit and fix.edit.changes
        text = apply(text, list(fix.edit.changes[uri]))
        change_doc(client, uri, text, version)
        await wait_for(lambda code=code: code not in codes(client, uri), what=f"{code} fixed")
    assert not codes(client, uri)


async def test_suppression_quick_fix(client: ArenaClient, workspace: Path) -> None:
    uri = open_doc(client, workspace / "train.py", BAD)
    await wait_for(lambda: "AR007" in codes(client, uri), what="AR007")
    actions = await actions_for(client, uri, "AR007")
    suppress = next(a for a in actions if a.title.startswith("Suppress AR007"))
    assert suppress.edit and suppress.edit.changes
    change_doc(client, uri, apply(BAD, list(suppress.edit.changes[uri])), 2)
    await wait_for(
        lambda: "AR007" not in codes(client, uri) and "AR008" in codes(client, uri), what="suppressed"
    )


async def test_every_trainer_rule_offers_a_suppression_that_silences_it(
    client: ArenaClient, workspace: Path
) -> None:
    """Each rule's documented example fires it; its ``Suppress`` action silences it on that line
    (AR000, a syntax error, has none). Each example is its own ``train.py``, so no diagnostics
    published for another example can be mistaken for its own."""
    for code in sorted(code for code in RULES if code != "AR000"):
        example = RULES[code].doc.example
        folder = workspace / "examples" / code
        folder.mkdir(parents=True)
        uri = open_doc(client, folder / "train.py", example)
        await wait_for(lambda code=code, uri=uri: code in codes(client, uri), what=f"{code} from its example")
        fired = next(d for d in client.diagnostics[uri] if d.code == code)
        actions = await actions_for(client, uri, code)
        suppress = next((a for a in actions if a.title.startswith(f"Suppress {code}")), None)
        assert suppress is not None and suppress.edit and suppress.edit.changes, f"no suppression for {code}"
        change_doc(client, uri, apply(example, list(suppress.edit.changes[uri])), 2)

        def silenced(code: str = code, uri: str = uri, line: int = fired.range.start.line) -> bool:
            return not any(d.code == code and d.range.start.line == line for d in client.diagnostics[uri])

        await wait_for(silenced, what=f"{code} suppressed on line {fired.range.start.line}")


async def test_manifest_quick_fixes(client: ArenaClient, workspace: Path) -> None:
    manifest = workspace / "training" / "manifest.json"
    shutil.copy(workspace / "train.py", workspace / "other.py")
    text = (
        '{\n  "version": 1,\n  "jobs": [\n    {\n      "id": "lm",\n      "kind": "train",\n'
        '      "command": "python",\n      "args": ["train.py"],\n      "status": "ready"\n    }\n  ]\n}\n'
    )
    uri = open_doc(client, manifest, text)
    await wait_for(lambda: {"AR104", "AR106"} <= codes(client, uri), what="manifest diagnostics")
    for code, version in (("AR104", 2), ("AR106", 3)):
        actions = await actions_for(client, uri, code)
        assert actions and actions[0].edit and actions[0].edit.changes
        text = apply(text, list(actions[0].edit.changes[uri]))
        change_doc(client, uri, text, version)
        await wait_for(lambda code=code: code not in codes(client, uri), what=f"{code} fixed")
    assert '"{python}"' in text and '"{step}"' in text


async def test_broken_inputs_never_crash_the_server(client: ArenaClient, workspace: Path) -> None:
    uri = open_doc(client, workspace / "train.py", "def broken(:\n    pass\n")
    await wait_for(lambda: codes(client, uri) == {"AR000"}, what="one syntax diagnostic")
    change_doc(client, uri, "", 2)
    await wait_for(lambda: "AR000" not in codes(client, uri), what="empty file linted")
    change_doc(client, uri, "x = 1\n" * 20_000, 3)
    manifest_uri = open_doc(
        client, workspace / "training" / "manifest.json", '{"version": 1, "jobs": [{"id": "a", '
    )
    await wait_for(lambda: "AR101" in codes(client, manifest_uri), what="AR101")
    (workspace / "bin.py").write_bytes(b"\xff\xfe\x00 train loop")
    open_doc(client, workspace / "bin.py", "\ufffd\ufffd train loop")
    assert (await client.call("arena/status", {}))["jobs"][0]["id"] == "lm", "still answering"
