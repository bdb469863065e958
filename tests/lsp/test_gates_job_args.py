"""Through a real arena-ls: the cadence a manifest job sets in its `args` is the one judged.

Two jobs run one trainer whose `--ckpt-every` defaults to 5000: `lm` passes
`--ckpt-every 500`, `slow` does not. `lm` may start; `slow` is refused for
AR005, and so is only it (status, AR108, the script's diagnostic naming it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

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

RARE = (
    (REPO / "training" / "train.py")
    .read_text()
    .replace(
        'p.add_argument("--ckpt-every", type=int, default=100)',
        'p.add_argument("--ckpt-every", type=int, default=5000)',
    )
)


def train_job(job_id: str, *extra_args: str) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "train",
        "command": "{python}",
        "args": ["train.py", "--steps", "5", *extra_args],
        "status": "ready",
        "resume": RESUME,
    }


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[ArenaClient]:
    root = tmp_path / "ws"
    root.mkdir()
    assert (REPO / "training" / "train.py").read_text() != RARE, "the reference's option moved"
    (root / "train.py").write_text(RARE)
    write_manifest(root, [train_job("lm", "--ckpt-every", "500"), train_job("slow")])
    lsp = await start_server(root, init_options={"device": {"fp32Only": True}})
    lsp.root = root  # type: ignore[attr-defined]
    yield lsp
    await stop_server(lsp)


async def test_each_job_is_judged_with_its_own_arguments(client: ArenaClient) -> None:
    root: Path = client.root  # type: ignore[attr-defined]
    status = await judged_status(client)
    by_id = {info["id"]: info for info in status["jobs"]}
    assert "AR005" not in {d["code"] for d in by_id["lm"].get("blockedBy") or []}
    slow = [d for d in by_id["slow"]["blockedBy"] if d["code"] == "AR005"]
    assert slow and "(job 'slow')" in slow[0]["message"]

    trainer_uri = (root / "train.py").as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=trainer_uri, language_id="python", version=1, text=RARE)
        )
    )
    manifest_uri = (root / "training" / "manifest.json").as_uri()
    await wait_for(lambda: manifest_uri in client.diagnostics, what="the manifest's diagnostics")
    ar108 = [d for d in client.diagnostics[manifest_uri] if d.code == "AR108"]
    assert [d.message.split(":")[0] for d in ar108] == ["job `slow`"]
    await wait_for(lambda: client.diagnostics.get(trainer_uri), what="the trainer's diagnostics")
    shown = [d for d in client.diagnostics[trainer_uri] if d.code == "AR005"]
    assert len(shown) == 1 and shown[0].message.endswith("(job 'slow')"), shown

    error = await client.call_error("arena/start", {"id": "slow"})
    assert error.code == 1004 and "AR005" in {d["code"] for d in error.data["diagnostics"]}
