"""AR014 end to end through a real arena-ls: a trainer that saves without announcing is
refused before launch; after AR014's quick fix it starts, stops with a checkpoint (the stop
file) and the next start resumes at that step."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from lsprotocol import types

from tests.helpers.lsp import RESUME, ArenaClient, start_server, stop_server, wait_for, write_manifest

# A tiny trainer that follows every gate but one: it saves, and never says which step it saved.
TRAINER = """\
import argparse
import os
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100000)
parser.add_argument("--ckpt-every", type=int, default=10)
parser.add_argument("--resume", action="store_true")
parser.add_argument("--start-step", type=int, default=0)
args = parser.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
stop_file = os.environ.get("ARENA_STOP_FILE", "STOP")
path = "ckpt.pt"
step = 0
if args.resume:
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = state["step"]
    if step != args.start_step:
        raise SystemExit(f"checkpoint at step {step}, asked for {args.start_step}")
    print(f"resumed at step {step}", flush=True)


def save(step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step},
               path + ".tmp")
    os.replace(path + ".tmp", path)


while step < args.steps:
    for attempt in range(3):
        try:
            loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
            loss.backward()
            break
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
    optimizer.step()
    optimizer.zero_grad()
    step += 1
    if step % 50 == 0:
        torch.cuda.empty_cache()
    if step % args.ckpt_every == 0:
        save(step)
    if os.path.exists(stop_file):
        save(step)
        break
    time.sleep(0.02)
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    pytest.importorskip("torch")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "train.py").write_text(TRAINER)
    write_manifest(
        root,
        [
            {
                "id": "lm",
                "kind": "train",
                "command": "{python}",
                "args": ["train.py"],
                "script": "train.py",
                "status": "ready",
                "resume": RESUME,
                "env": {"OMP_NUM_THREADS": "1"},
                "stop": {"method": "file", "graceSeconds": 60},
            }
        ],
    )
    return root


@pytest.fixture
async def client(workspace: Path) -> AsyncIterator[ArenaClient]:
    lsp = await start_server(workspace)
    yield lsp
    with contextlib.suppress(Exception):  # nothing may be running any more
        await lsp.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(lsp)


def _codes(client: ArenaClient, uri: str) -> set[str]:
    return {str(d.code) for d in client.diagnostics.get(uri, [])}


def _lines_of(client: ArenaClient, run_id: str) -> list[str]:
    return [
        line["text"] for batch in client.log_batches if batch["runId"] == run_id for line in batch["lines"]
    ]


def _announced_checkpoint(client: ArenaClient, run_id: str) -> bool:
    return any(text.startswith("@arena ") and '"checkpoint"' in text for text in _lines_of(client, run_id))


async def test_unannounced_saves_are_refused_and_the_quick_fix_makes_the_run_resumable(
    client: ArenaClient, workspace: Path
) -> None:
    trainer = workspace / "train.py"
    uri = trainer.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=TRAINER)
        )
    )
    await wait_for(lambda: "AR014" in _codes(client, uri), what="AR014 on the trainer")
    assert _codes(client, uri) == {"AR014"}, "the trainer passes every other gate"

    refused = await client.call_error("arena/start", {"id": "lm"})
    assert (refused.code, refused.data["reason"]) == (1004, "gates-failed")
    assert [d["code"] for d in refused.data["diagnostics"]] == ["AR014"]

    diagnostic = next(d for d in client.diagnostics[uri] if d.code == "AR014")
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic]),
        )
    )
    fix = next(
        a for a in actions or [] if isinstance(a, types.CodeAction) and not a.title.startswith("Suppress")
    )
    assert fix.edit and fix.edit.changes
    fixed = _apply(TRAINER, list(fix.edit.changes[uri]))
    trainer.write_text(fixed)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
        )
    )
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri=uri)))
    await wait_for(
        lambda: uri in client.diagnostics and not _codes(client, uri), what="the trainer to pass every gate"
    )

    first = await client.call("arena/start", {"id": "lm"})
    await wait_for(lambda: _announced_checkpoint(client, first["runId"]), 240, what="an announced checkpoint")
    stopped = await client.call("arena/stop", {})
    assert stopped["status"] == "stopped" and stopped["stoppedBy"] == "file"
    step = stopped["lastCheckpoint"]["step"]
    assert step >= 10
    saved = [
        json.loads(text[len("@arena ") :])
        for text in _lines_of(client, first["runId"])
        if text.startswith("@arena ") and '"checkpoint"' in text
    ]
    assert saved[-1]["step"] == step and saved[-1]["path"] == "ckpt.pt"

    second = await client.call("arena/start", {"id": "lm"})
    await wait_for(
        lambda: f"resumed at step {step}" in _lines_of(client, second["runId"]),
        240,
        what=f"the relaunch to resume at step {step}",
    )


def _apply(text: str, edits: list[types.TextEdit]) -> str:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(position: types.Position) -> int:
        return starts[min(position.line, len(lines))] + position.character

    ordered = sorted(edits, key=lambda edit: offset(edit.range.start), reverse=True)
    for edit in ordered:
        text = text[: offset(edit.range.start)] + edit.new_text + text[offset(edit.range.end) :]
    return text
