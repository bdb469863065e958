"""The terminal client reads a run's whole ``arena/metrics``, following ``next`` (contract 7.2).

A run with more points and checkpoints than one page (10,000 each) must plot
whole and list every checkpoint; a page boundary must never split a step or a
checkpoint in two. Against a real ``arena-ls`` and real runs (the page size
lowered through the request's own ``limit``), and end to end through
``arena plot``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from arena_ls.client.metrics_all_pages import read_all_metrics
from arena_ls.run.outputlog import STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunState
from arena_ls.run.states import RunStatus
from tests.client.support import run_arena, stop_every_run, wait_until_no_run_is_active
from tests.helpers.lsp import (
    ArenaClient,
    job,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_status,
)

ONE_PAGE = 10_000
LONG_STEPS = ONE_PAGE + 2_000


async def one_big_page(client: ArenaClient, run_id: str) -> dict[str, Any]:
    page = await client.call("arena/metrics", {"runId": run_id, "limit": ONE_PAGE})
    assert page["next"] is None, "the whole run fits the largest page"
    return dict(page)


async def test_small_pages_merge_into_what_one_page_holds(tmp_path: Path) -> None:
    make_workspace(
        tmp_path, [job("q", "--steps", "30", "--interval", "0", "--ckpt-every", "3", "--eval-every", "5")]
    )
    client = await start_server(tmp_path)
    try:
        info = await client.call("arena/start", {"id": "q"})
        await wait_status(client, info["runId"], "succeeded")
        whole = await one_big_page(client, info["runId"])
        assert len(whole["points"]) == 30 and len(whole["checkpoints"]) == 10 and len(whole["evals"]) == 6
        for limit in (1, 4, 7):
            merged = await read_all_metrics(client.call, info["runId"], limit=limit)
            assert merged == whole, f"pages of {limit}"
    finally:
        await stop_server(client)


def write_twin_run(template: Path, steps: int) -> str:
    """A finished run whose trainer announced each step and checkpoint twice, as the reference
    trainer does (a plain line, then its ``@arena`` twin), written as an agent writes logs."""
    run_id = "twin-run-000001"
    run = RunDir(template.parent / run_id)
    run.path.mkdir()
    spec = json.loads((template / "spec.json").read_text())
    (run.path / "spec.json").write_text(json.dumps({**spec, "runId": run_id, "jobId": "q"}))
    writer = OutputWriter(run.path)
    for step in range(1, steps + 1):
        lines = [
            f"step {step}/{steps} loss {3.0 / step:.4f}\n",
            f'@arena {{"event": "progress", "step": {step}, "total": {steps}, "lr": 0.01}}\n',
            f"saved checkpoint step={step}\n",
            f'@arena {{"event": "checkpoint", "step": {step}, "path": "ckpt-{step}.pt"}}\n',
        ]
        writer.append(STDOUT, "".join(lines).encode())
    writer.close()
    run.write_state(RunState(run_id=run_id, job_id="q", status=RunStatus.SUCCEEDED))
    return run_id


async def test_a_step_announced_twice_across_a_page_boundary_is_one_point(tmp_path: Path) -> None:
    make_workspace(tmp_path, [job("q", "--steps", "1")])
    client = await start_server(tmp_path)
    try:
        info = await client.call("arena/start", {"id": "q"})
        await wait_status(client, info["runId"], "succeeded")
        run_id = write_twin_run(Path(info["logPath"]).parent, 12)
        whole = await one_big_page(client, run_id)
        assert [p["step"] for p in whole["points"]] == list(range(1, 13))
        assert all(p["loss"] is not None and p["lr"] == 0.01 for p in whole["points"])
        first = await client.call("arena/metrics", {"runId": run_id, "limit": 1})
        assert first["points"][0]["lr"] is None, "the boundary falls between the twins: the case tested"
        for limit in (1, 2, 5):
            merged = await read_all_metrics(client.call, run_id, limit=limit)
            assert merged["points"] == whole["points"], f"pages of {limit}"
            assert merged["checkpoints"] == whole["checkpoints"], f"pages of {limit}"
    finally:
        await stop_server(client)


async def test_a_live_run_is_read_to_where_its_log_ends(tmp_path: Path) -> None:
    """While a run is live ``next`` is always a cursor: reading stops at the log's end."""
    make_workspace(tmp_path, [job("slow", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "2")])
    client = await start_server(tmp_path)
    try:
        info = await client.call("arena/start", {"id": "slow"})

        async def six_points() -> bool:
            return len((await client.call("arena/metrics", {"runId": info["runId"]}))["points"]) >= 6

        await poll_until(six_points, "six progress points")
        merged = await read_all_metrics(client.call, info["runId"], limit=2)
        steps = [p["step"] for p in merged["points"]]
        assert len(steps) >= 6 and steps == list(range(1, len(steps) + 1)), "every point once, in order"
        assert merged["next"], "a live run: the cursor a later read would go on from"
    finally:
        await client.call("arena/stop", {"runId": info["runId"], "kill": True})
        await stop_server(client)


def test_arena_plot_draws_a_run_longer_than_one_page(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="arena plot needs the extra `plot` (matplotlib)")
    long_job = job(
        "long", "--steps", str(LONG_STEPS), "--interval", "0", "--ckpt-every", "1", "--eval-every", "1"
    )
    root = make_workspace(tmp_path / "ws", [long_job])
    try:
        assert run_arena(root, "start", "long").returncode == 0
        wait_until_no_run_is_active(root, "the long run to end", timeout=300)
        out = tmp_path / "long.png"
        done = run_arena(root, "plot", "long", "--out", str(out))
    finally:
        stop_every_run(root)
    assert done.returncode == 0, done.stderr
    summary = done.stdout.splitlines()[1]
    counts = re.search(r"(\d+) checkpoints, (\d+) eval points", summary)
    assert counts, summary
    assert (int(counts.group(1)), int(counts.group(2))) == (LONG_STEPS, LONG_STEPS), summary
