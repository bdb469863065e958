"""Issue 36, end to end with a real arena-ls, real agents and a real trainer whose saves a kill tears
(``torn_save_trainer.py``): every resume verifies its checkpoint first (contract 8.2).

On main before issue 36 each of these relaunched onto the torn file: the trainer refused it and
the run ended ``resume-refused`` (the checkpoint it needed already gone, or never looked for).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lsp import (
    RESUME,
    ArenaClient,
    all_logs,
    poll_until,
    start_server,
    stop_server,
    wait_for,
    wait_status,
    write_manifest,
)

TRAINERS = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
SCRIPT = "torn_save_trainer.py"

pytestmark = pytest.mark.skipif(os.name == "nt", reason="kills the trainer with SIGKILL")


@pytest.fixture
async def workspace(tmp_path: Path) -> AsyncIterator[tuple[Path, list[ArenaClient]]]:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(TRAINERS / SCRIPT, root / SCRIPT)
    clients: list[ArenaClient] = []
    yield root, clients
    for client in clients:
        with contextlib.suppress(Exception):
            await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)


async def serve(root: Path, clients: list[ArenaClient], *args: str) -> ArenaClient:
    write_manifest(
        root,
        [
            {
                "id": "lm",
                "kind": "train",
                "command": "{python}",
                "args": [SCRIPT, *args],
                "script": SCRIPT,
                "status": "ready",
                "resume": RESUME,
                "stop": {"method": "file", "graceSeconds": 30},
                "restart": {"maxRestarts": 3, "backoffSeconds": 0},
            }
        ],
    )
    client = await start_server(root)
    clients.append(client)
    return client


async def kill_when(client: ArenaClient, root: Path, run_id: str, marker: str) -> None:
    """SIGKILL the trainer once it created ``marker`` (it waits there, mid-save or after one)."""
    await wait_for(lambda: (root / marker).exists(), timeout=120, what=marker)
    info = await wait_status(client, run_id, "running")
    os.kill(info["pid"], signal.SIGKILL)


async def final(client: ArenaClient, run_id: str) -> dict[str, Any]:
    return await wait_status(client, run_id, "crashed", "succeeded", "stopped", "lost", timeout=120)


async def arena_lines(client: ArenaClient, run_id: str) -> list[str]:
    return [line["text"] for line in await all_logs(client, run_id) if line["stream"] == "arena"]


async def test_a_kill_during_an_announced_save_resumes_from_the_previous_whole_checkpoint(
    workspace: tuple[Path, list[ArenaClient]],
) -> None:
    """ckpt-N files, an asynchronous save announced as it starts, killed half-written at step 40:
    the relaunch skips step 40 (its size is not the announced one) for step 20, verified by sha256."""
    root, clients = workspace
    client = await serve(root, clients, "--announce", "before", "--hang-in-save", "40", "--steps", "60")
    run = await client.call("arena/start", {"id": "lm"})
    await kill_when(client, root, run["runId"], "writing-40")

    done = await final(client, run["runId"])
    assert done["status"] == "succeeded", done
    resumed = done["resumedFrom"]
    assert (resumed["step"], resumed["path"], resumed["verified"]) == (20, "ckpt-20.json", "sha256"), resumed
    assert [(s["step"], s["path"]) for s in resumed["skipped"]] == [(40, "ckpt-40.json")]
    assert "announced: torn or replaced" in resumed["skipped"][0]["why"]
    lines = await arena_lines(client, run["runId"])
    assert "restarting from step 20 (attempt 1/3) in 0s" in lines, lines
    assert any(
        line.startswith("resuming from step 20 (ckpt-20.json), verified by sha256; skipped step 40")
        for line in lines
    )
    logs = [line["text"] for line in await all_logs(client, run["runId"])]
    assert "resumed from ckpt-20.json at step 20" in logs


async def test_a_torn_file_with_an_announced_sha256_is_skipped(
    workspace: tuple[Path, list[ArenaClient]],
) -> None:
    """Saved whole and announced at 40, then damaged on disk (the same size, other bytes) before a
    kill at 50: the relaunch skips it on its sha256 and resumes from step 20."""
    root, clients = workspace
    client = await serve(root, clients, "--hang-at", "50", "--steps", "70")
    run = await client.call("arena/start", {"id": "lm"})
    await wait_for(lambda: (root / "at-50").exists(), timeout=120, what="at-50")
    torn = root / "ckpt-40.json"
    size = torn.stat().st_size
    torn.write_bytes(b"\0" * size)  # a disk that lost the save's pages: the size is right
    await kill_when(client, root, run["runId"], "at-50")

    done = await final(client, run["runId"])
    assert done["status"] == "succeeded", done
    resumed = done["resumedFrom"]
    assert (resumed["step"], resumed["verified"]) == (20, "sha256")
    assert [s["step"] for s in resumed["skipped"]] == [40]
    assert "sha256" in resumed["skipped"][0]["why"] and "differs" in resumed["skipped"][0]["why"]


async def test_one_file_overwritten_in_place_and_torn_ends_resume_unknown_never_resuming_from_garbage(
    workspace: tuple[Path, list[ArenaClient]],
) -> None:
    """nanoGPT's way: one ckpt.json overwritten in place, killed half-way through step 40's save
    (step 20's announced sha256 no longer matches): no relaunch, crashed resume-unknown naming
    what failed, and the file left as the kill left it."""
    root, clients = workspace
    client = await serve(root, clients, "--layout", "one", "--hang-in-save", "40", "--steps", "60")
    run = await client.call("arena/start", {"id": "lm"})
    await kill_when(client, root, run["runId"], "writing-40")

    done = await final(client, run["runId"])
    assert done["status"] == "crashed", done
    assert done["failure"]["kind"] == "resume-unknown"
    assert "step 20 (ckpt.json)" in done["failure"]["evidence"]
    assert "torn or replaced" in done["failure"]["evidence"]
    assert done["resumedFrom"] is None
    lines = await arena_lines(client, run["runId"])
    assert not any(line.startswith("restarting") for line in lines), lines
    assert sum(line.startswith("starting ") for line in lines) == 1, "no second trainer was started"
    half = (root / "ckpt.json").read_bytes()
    assert b'"step": 40' in half and not half.endswith(b"}"), "the torn save, untouched"


async def test_a_start_that_resumes_verifies_first_and_refuses_a_torn_checkpoint(
    workspace: tuple[Path, list[ArenaClient]],
) -> None:
    """The job's last checkpoint (a cooperative stop's) is damaged before the next start: the start
    resumes from the previous one, verified, instead of handing the trainer the damaged file.

    The run is long (it is stopped anyway): 400 steps of 0.02 s could end before a loaded
    machine's stop reached the trainer, and the stop then found nothing to stop."""
    root, clients = workspace
    client = await serve(root, clients, "--steps", "100000", "--interval", "0.02")
    first = await client.call("arena/start", {"id": "lm"})
    await wait_for(lambda: (root / "ckpt-40.json").exists(), timeout=120, what="ckpt-40.json")
    stopped = await client.call("arena/stop", {"confirm": True})
    last = stopped["lastCheckpoint"]
    assert stopped["status"] == "stopped" and last["step"] >= 40
    (root / last["path"]).write_bytes(b"{torn")
    second = await client.call("arena/start", {"id": "lm"})
    assert second["runId"] != first["runId"]
    info = await wait_for_resumed(client, second["runId"])
    resumed = info["resumedFrom"]
    assert resumed["step"] < last["step"] and resumed["verified"] == "sha256"
    assert resumed["skipped"][0]["step"] == last["step"]
    await client.call("arena/stop", {"confirm": True})


async def wait_for_resumed(client: ArenaClient, run_id: str) -> dict[str, Any]:
    """The run's RunInfo once it says where it resumed from (or once it ended)."""
    found: dict[str, Any] = {}

    async def resumed() -> bool:
        info = await wait_status(client, run_id, "running", "succeeded", "crashed", "stopped")
        found.update(info)
        return info["resumedFrom"] is not None or info["status"] != "running"

    await poll_until(resumed, "resumedFrom", timeout=120)
    return found
