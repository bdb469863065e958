"""One broken feature never takes the others, or the request, down with it.

A real ``arena-ls`` over stdio with a feature that raises in every hook,
plugged in *before* the real ones: the diagnostics, lenses and quick fixes
still work, and each failure is on stderr (here: the log file) with its
traceback.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lsprotocol import types

from tests.helpers.lsp import ArenaClient, start_server, stop_server, wait_for, write_manifest
from tests.lsp.test_gates_in_the_editor import BAD, GOOD, actions_for, codes, lens_titles, open_doc, train_job

BROKEN_SERVER = [sys.executable, "-m", "tests.helpers.broken_feature_server"]


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[ArenaClient]:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "train.py").write_text(BAD)
    write_manifest(root, [train_job()])
    lsp = await start_server(
        root,
        init_options={"device": {"fp32Only": True}},
        env={"ARENA_TEST_LOG": str(tmp_path / "server.log")},
        command=BROKEN_SERVER,
    )
    yield lsp
    await stop_server(lsp)


def server_log(tmp_path: Path) -> str:
    path = tmp_path / "server.log"
    return path.read_text(encoding="utf-8") if path.exists() else ""


async def test_a_feature_that_raises_leaves_the_others_working(client: ArenaClient, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    uri = open_doc(client, workspace / "train.py", BAD)
    await wait_for(
        lambda: {"AR007", "AR008"} <= codes(client, uri), what="diagnostics despite didOpen failing"
    )
    manifest_uri = (workspace / "training" / "manifest.json").as_uri()
    titles = await lens_titles(client, manifest_uri)
    assert any(t.startswith("⛔ Blocked: AR00") for t in titles), titles
    fixes = await actions_for(client, uri, "AR007")
    assert any(a.title.startswith("Suppress AR007") for a in fixes), [a.title for a in fixes]
    status = await client.call("arena/status", {})
    assert status["jobs"][0]["id"] == "lm"

    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=GOOD)],
        )
    )
    await wait_for(lambda: not codes(client, uri), what="diagnostics to clear despite didChange failing")

    for hook in ("document_open", "document_change", "code_lens", "code_action"):
        await wait_for(
            lambda hook=hook: f"feature BrokenFeature failed in {hook}" in server_log(tmp_path),
            what=f"the {hook} failure in the log",
        )
    text = server_log(tmp_path)
    assert "Traceback (most recent call last)" in text
    assert "RuntimeError: broken feature: didOpen" in text


async def test_a_failing_command_or_settings_subscriber_is_isolated(
    client: ArenaClient, tmp_path: Path
) -> None:
    error = await client.call_error(
        "workspace/executeCommand", types.ExecuteCommandParams("arena.test.broken", [])
    )
    assert "internal error: RuntimeError: broken feature: command" in error.message
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"arena": {"logs": {"notifyHz": 5}}})
    )
    await wait_for(
        lambda: "settings subscriber" in server_log(tmp_path), what="the subscriber failure logged"
    )
    assert "RuntimeError: broken feature: settings" in server_log(tmp_path)
    shown = await client.call(
        "workspace/executeCommand", types.ExecuteCommandParams("arena.showBlocked", [{"id": "lm"}])
    )
    assert {d["code"] for d in shown["blockedBy"]} == {"AR007", "AR008"}
