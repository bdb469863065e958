"""Issue 23, failure 3, end to end: hostile ``@arena`` lines never fail a run.

The trainer (``tests/fixtures/trainers/hostile_trainer.py``) prints 400-digit
integers, 1e300, NaN, deep JSON, invalid UTF-8 and a 10 MB line, with a real
checkpoint announced in the same write. On main one such line made the
server mark the run damaged and ``lost``, silenced ``arena/log`` and
``$/progress``, and the agent dropped the checkpoint of the same write.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from lsprotocol import types

from tests.helpers.lsp import (
    REPO,
    RESUME,
    ArenaClient,
    all_logs,
    make_workspace,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

HOSTILE_TRAINER = REPO / "tests" / "fixtures" / "trainers" / "hostile_trainer.py"


def _progress_messages(client: ArenaClient) -> list[str]:
    return [
        value.message or ""
        for values in client.progress_reports.values()
        for value in values
        if isinstance(value, types.WorkDoneProgressReport)
    ]


async def test_hostile_arena_lines_leave_the_run_succeeded_with_its_checkpoint(tmp_path: Path) -> None:
    spec = {"id": "hostile", "name": "Hostile", "kind": "train", "command": "{python}",
            "args": ["hostile_trainer.py"], "script": "hostile_trainer.py", "resume": RESUME,
            "status": "ready"}  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    shutil.copy(HOSTILE_TRAINER, root / "hostile_trainer.py")
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "hostile"})
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost", "stopped")
        assert final["status"] == "succeeded", final
        assert final["failure"] is None
        assert final["lastCheckpoint"]["step"] == 4 and final["lastCheckpoint"]["path"] == "ckpt.pt"
        assert final["step"] == 8
        await wait_for(
            lambda: any(x["text"] == "hostile trainer done" for x in client.log_lines),
            what="arena/log to carry the lines after the hostile ones",
        )
        texts = [x["text"] for x in await all_logs(client, info["runId"])]
        assert "after the hostile write" in texts and "after the long line" in texts
        assert any(text.startswith('@arena {"event": "progress", "step": 9999') for text in texts), (
            "a hostile line is an ordinary log line"
        )
        await wait_for(
            lambda: any(
                m.startswith(("step 5/8", "step 6/8", "step 7/8", "step 8/8"))
                for m in _progress_messages(client)
            ),
            what="$/progress past the hostile write",
        )
        recorded = json.loads((run_dir(root, info["runId"]) / "state.json").read_text())
        assert recorded["status"] == "succeeded"
        assert recorded["lastCheckpoint"]["step"] == 4, recorded["lastCheckpoint"]
    finally:
        await stop_server(client)

    fresh = await start_server(root)
    try:
        again = await wait_status(fresh, info["runId"], "succeeded", "crashed", "lost")
        assert again["status"] == "succeeded" and again["failure"] is None, again
        assert again["lastCheckpoint"]["step"] == 4
        assert "hostile trainer done" in [x["text"] for x in await all_logs(fresh, info["runId"])]
    finally:
        await stop_server(fresh)
