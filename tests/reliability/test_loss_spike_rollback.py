"""Issue 36, end to end: a loss spike rolls the run back to a verified checkpoint before it, with the
batches skipped, at most ``insights.rollbackMax`` times (contract 8.2), with a real arena-ls, agent
and trainer (``spike_trainer.py``). On main before issue 36 a spike was only an insight: the run
went on from the diverged weights, with no rollback, no ``rollbacks`` in ``arena/metrics``."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lsp import ArenaClient, all_logs, start_server, stop_server, wait_status, write_manifest

TRAINERS = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
SCRIPT = "spike_trainer.py"
RESUME = {"args": ["--resume", "--start-step", "{step}", "--skip-batches", "{skip}"]}
ROLLBACK = {
    "lossSpikeAction": "rollback",
    "rollbackStepsBefore": 20,
    "rollbackSkipBatches": 50,
    "rollbackMax": 2,
}


@pytest.fixture
async def clients() -> AsyncIterator[list[ArenaClient]]:
    started: list[ArenaClient] = []
    yield started
    for client in started:
        with contextlib.suppress(Exception):
            await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)


async def run_job(root: Path, clients: list[ArenaClient], *args: str) -> tuple[ArenaClient, dict[str, Any]]:
    root.mkdir()
    shutil.copy(TRAINERS / SCRIPT, root / SCRIPT)
    job = {"id": "lm", "kind": "train", "command": "{python}", "args": [SCRIPT, *args], "script": SCRIPT,
           "status": "ready", "resume": RESUME, "stop": {"method": "file", "graceSeconds": 30},
           "restart": {"maxRestarts": 3, "backoffSeconds": 0}}  # fmt: skip
    write_manifest(root, [job])
    client = await start_server(root, init_options={"insights": ROLLBACK})
    clients.append(client)
    run = await client.call("arena/start", {"id": "lm"})
    done = await wait_status(client, run["runId"], "succeeded", "crashed", "stopped", "lost", timeout=180)
    return client, done


async def arena_lines(client: ArenaClient, run_id: str) -> list[str]:
    return [line["text"] for line in await all_logs(client, run_id) if line["stream"] == "arena"]


async def test_a_spike_rolls_back_to_the_checkpoint_before_it_with_the_batches_skipped(
    tmp_path: Path, clients: list[ArenaClient]
) -> None:
    client, done = await run_job(tmp_path / "ws", clients, "--spike-at-batch", "60", "--steps", "120")
    assert done["status"] == "succeeded", done
    metrics = await client.call("arena/metrics", {"runId": done["runId"]})
    assert [(r["spikeStep"], r["step"], r["skipBatches"]) for r in metrics["rollbacks"]] == [(60, 40, 50)]
    lines = await arena_lines(client, done["runId"])
    assert (
        "rolling back: loss spike at step 60; resuming from step 40, skipping 50 batches (rollback 1/2)"
        in lines
    )
    assert any(line.startswith("resuming from step 40 (ckpt-40.json), verified by sha256") for line in lines)
    assert done["argv"][-5:] == ["--resume", "--start-step", "40", "--skip-batches", "50"]
    assert (done["resumedFrom"]["step"], done["resumedFrom"]["verified"]) == (40, "sha256")
    logs = [line["text"] for line in await all_logs(client, done["runId"])]
    assert "resumed from step 40, skipping 50 batches (offset 50)" in logs
    losses = [p["loss"] for p in metrics["points"] if p["step"] > 60]
    assert losses and max(losses) < 10.0, "the batch that spiked was skipped: no spike after the rollback"


async def test_rollbacks_stop_at_rollback_max_and_the_run_goes_on(
    tmp_path: Path, clients: list[ArenaClient]
) -> None:
    """A spike 30 steps after every launch, whatever the batch: two rollbacks, then a warning."""
    client, done = await run_job(
        tmp_path / "ws", clients, "--spike-after", "30", "--hold-launches", "2", "--steps", "90"
    )
    assert done["status"] == "succeeded", done
    metrics = await client.call("arena/metrics", {"runId": done["runId"]})
    assert [(r["spikeStep"], r["step"]) for r in metrics["rollbacks"]] == [(30, 10), (40, 20)]
    lines = await arena_lines(client, done["runId"])
    assert sum(line.startswith("rolling back:") for line in lines) == 2
    assert any(
        "loss spike at step 50: no rollback, 2 of insights.rollbackMax 2 done" in line for line in lines
    ), lines
