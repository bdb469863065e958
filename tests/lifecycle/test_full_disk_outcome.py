"""Issue 23, failure 4: a full disk never erases a finished run's outcome (contract 7.1).

On a real small filesystem (a tmpfs of 24 MB as the state folder, filled to
the last byte): a trainer that exits 0 while the disk is full is recorded
``succeeded``. The agent reserved the space of its final state when the run
started (``state.reserve``), so the outcome is written at once; without that
reserve it is written into the blocks ``state.json`` holds already (issue 39
item 7), and where even that cannot be the agent keeps retrying for as long as
it lives (the run reads ``running`` or ``stopping``, never ``lost``, meanwhile).
On main the agent gave up after 30 s and the run was ``lost``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Any

from arena_ls.agent.reserve import RESERVE_NAME
from tests.helpers.lsp import (
    ArenaClient,
    make_workspace,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)
from tests.lifecycle.test_full_disk import fill, small_filesystem

WAITS_FOR_GO = """
import pathlib, sys, time
print("ready", flush=True)
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.05)
print("bye", flush=True)
"""
"""A trainer that ends (exit 0) when the test says so: once the state folder is full."""


def _workspace(tmp_path: Path) -> tuple[Path, Path]:
    go = tmp_path / "go"
    spec = {"id": "ends", "name": "Ends", "kind": "task", "command": "{python}",
            "args": ["waits.py", str(go)], "status": "ready"}  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    (root / "waits.py").write_text(WAITS_FOR_GO)
    return root, go


async def _start_on(root: Path, small: Path) -> tuple[ArenaClient, dict[str, Any], Path]:
    client = await start_server(root, init_options={"stateDir": str(small / "state"),
                                                    "preflight": {"minFreeDiskMb": 0}})  # fmt: skip
    info = await client.call("arena/start", {"id": "ends"})
    await wait_for(
        lambda: any(x["text"] == "ready" for x in client.log_lines), what="the trainer's first line"
    )
    folder = small / "state" / "runs" / info["runId"]
    await wait_for(lambda: (folder / RESERVE_NAME).exists(), what="the final state's reserved space")
    return client, info, folder


def _recorded(folder: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((folder / "state.json").read_text())
    return state


def _free(small: Path) -> None:
    subprocess.run(
        ["mount", "-o", "remount,size=256m", str(small)], check=True, capture_output=True, timeout=30
    )


async def _finish(client: ArenaClient, small: Path) -> None:
    with contextlib.suppress(Exception):
        _free(small)
    with contextlib.suppress(Exception):
        await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


async def test_a_trainer_that_ends_on_a_full_disk_is_recorded_succeeded_at_once(tmp_path: Path) -> None:
    root, go = _workspace(tmp_path)
    with small_filesystem(tmp_path / "small", "24m") as small:
        client, info, folder = await _start_on(root, small)
        try:
            fill(small)
            go.touch()
            final = await wait_status(client, info["runId"], "succeeded", "lost", "crashed")
            assert final["status"] == "succeeded", final
            assert _recorded(folder)["status"] == "succeeded", "on disk, while the disk is still full"
            assert _recorded(folder)["exitCode"] == 0
            assert "lost" not in client.status_of(info["runId"])
        finally:
            await _finish(client, small)


async def test_without_its_reserve_the_final_state_is_written_in_place_at_once(tmp_path: Path) -> None:
    """No reserve (as when the disk was full before the run started): the final state goes into
    the blocks ``state.json`` holds already (issue 39 item 7), while the disk is still full. Where
    even that cannot be, the writer retries until space returns (``test_stop_marks.py``)."""
    root, go = _workspace(tmp_path)
    with small_filesystem(tmp_path / "small", "24m") as small:
        client, info, folder = await _start_on(root, small)
        try:
            (folder / RESERVE_NAME).unlink()  # as if the disk had been too full to reserve it
            fill(small)
            go.touch()
            final = await wait_status(client, info["runId"], "succeeded", "lost", "crashed")
            assert final["status"] == "succeeded" and final["exitCode"] == 0, final
            assert _recorded(folder)["status"] == "succeeded", "on disk, while the disk is still full"
            assert "lost" not in client.status_of(info["runId"])
        finally:
            await _finish(client, small)
