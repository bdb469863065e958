"""AR013 edited-during-run through a real arena-ls: while a trainer's run is live, the open
trainer carries an information diagnostic at its top; an edit on disk is the
``edited-during-run`` insight; both go when the run ends."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from lsprotocol import types

from tests.helpers.lsp import REPO, RESUME, ArenaClient, make_workspace, start_server, stop_server, wait_for
from tests.lsp.test_gates_in_the_editor import change_doc, codes, open_doc
from tests.lsp.test_insights import poll_until

INSIGHT_TRAINER = REPO / "tests" / "fixtures" / "trainers" / "insight_trainer.py"


def live_note(client: ArenaClient, uri: str) -> types.Diagnostic | None:
    return next((d for d in client.diagnostics.get(uri, []) if d.code == "AR013"), None)


@pytest.mark.parametrize("editor", ["visual-studio-code", "neovim"])
async def test_editing_a_live_trainer_shows_ar013_until_the_run_ends(tmp_path: Path, editor: str) -> None:
    job = {
        "id": "lm", "kind": "train", "command": "{python}", "status": "ready", "resume": RESUME,
        "args": ["insight_trainer.py", "--ckpt-every", "5"], "script": "insight_trainer.py",
    }  # fmt: skip
    root = make_workspace(tmp_path / "ws", [job])
    trainer = root / "insight_trainer.py"
    shutil.copy(INSIGHT_TRAINER, trainer)
    text = trainer.read_text()
    client = await start_server(root, capabilities=editor)
    try:
        uri = open_doc(client, trainer, text)
        await wait_for(lambda: uri in client.diagnostics, what="the trainer's first diagnostics")
        assert live_note(client, uri) is None  # no run yet
        run = await client.call("arena/start", {"id": "lm"})
        note = await wait_for(lambda: live_note(client, uri), what="AR013 after the start")
        assert note.severity == types.DiagnosticSeverity.Information and note.range.start.line == 0
        assert "next launch" in note.message and run["runId"] in note.message
        assert note.code_description is not None and note.code_description.href.endswith(
            "insights.md#ar013-edited-during-run"
        )
        change_doc(client, uri, text + "\n# an edit\n", 2)
        trainer.write_text(text + "\n# an edit\n")
        os.utime(trainer, None)

        async def edited() -> bool:
            status = await client.call("arena/status", {})
            active = status["active"] or {}
            return any(i["kind"] == "edited-during-run" for i in active.get("insights", []))

        await poll_until(edited, "the edited-during-run insight")
        assert live_note(client, uri) is not None and "AR013" in codes(client, uri)
        # confirm: on a loaded machine the run may not have reached its first checkpoint yet, and a
        # stop that would lose training is asked first (1 of 25 loaded rounds); that is not this test's.
        await client.call("arena/stop", {"id": "lm", "confirm": True})
        await wait_for(lambda: live_note(client, uri) is None, what="AR013 to go after the run ended")
        status = await client.call("arena/status", {})
        assert all(r["insights"] == [] for r in status["runs"])
    finally:
        await stop_server(client)
