"""Live progress ($/progress and its log-line fallback), plain-line patterns, metrics,
and the reference PyTorch trainer end to end through the server."""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types

from tests.helpers.lsp import (
    REPO,
    RESUME,
    ArenaClient,
    all_logs,
    job,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)


async def finish(client: ArenaClient) -> None:
    await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


def progress_of(client: ArenaClient) -> list[Any]:
    return [value for reports in client.progress_reports.values() for value in reports]


@pytest.mark.parametrize("capabilities", ["visual-studio-code", "neovim"])
async def test_work_done_progress_for_a_run(tmp_path: Path, capabilities: str) -> None:
    root = make_workspace(tmp_path / "ws", [job("steps", "--steps", "40", "--interval", "0.03")])
    client = await start_server(root, capabilities=capabilities)
    try:
        info = await client.call("arena/start", {"id": "steps"})
        await wait_status(client, info["runId"], "succeeded")
        await wait_for(
            lambda: any(isinstance(v, types.WorkDoneProgressEnd) for v in progress_of(client)), what="end"
        )
        assert len(client.progress_reports) == 1
        values = progress_of(client)
        begins = [v for v in values if isinstance(v, types.WorkDoneProgressBegin)]
        ends = [v for v in values if isinstance(v, types.WorkDoneProgressEnd)]
        reports = [v for v in values if isinstance(v, types.WorkDoneProgressReport)]
        assert len(begins) == 1 and len(ends) == 1
        assert begins[0].title == "Job steps" and begins[0].cancellable is True
        assert isinstance(values[0], types.WorkDoneProgressBegin)
        assert isinstance(values[-1], types.WorkDoneProgressEnd)
        assert ends[0].message == "succeeded"
        percentages = [r.percentage for r in reports if r.percentage is not None]
        assert percentages and percentages == sorted(percentages)
        assert any(r.message and "step" in r.message and "loss" in r.message for r in reports)
    finally:
        await finish(client)


async def test_cancelling_the_progress_stops_the_run(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("long", "--steps", "100000", "--interval", "0.03")])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "long"})
        await wait_for(lambda: client.progress_reports, what="a progress token")
        token = next(iter(client.progress_reports))
        await wait_for(
            lambda: any(isinstance(v, types.WorkDoneProgressBegin) for v in client.progress_reports[token])
        )
        client.protocol.notify(
            types.WINDOW_WORK_DONE_PROGRESS_CANCEL, types.WorkDoneProgressCancelParams(token=token)
        )
        final = await wait_status(client, info["runId"], "stopped")
        assert final["stoppedBy"] == "file"
    finally:
        await finish(client)


async def test_a_client_without_work_done_progress_gets_log_lines(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("steps", "--steps", "10", "--interval", "0.02")])
    client = await start_server(root, capabilities=types.ClientCapabilities())
    try:
        info = await client.call("arena/start", {"id": "steps"})
        await wait_status(client, info["runId"], "succeeded")
        await wait_for(lambda: any(m.message == "Job steps: succeeded" for m in client.log_messages))
        assert client.progress_reports == {}
        assert any(m.message == "Job steps: started" for m in client.log_messages)
    finally:
        await finish(client)


@pytest.mark.parametrize("style", ["--plain", "--tqdm"])
async def test_progress_from_plain_lines(tmp_path: Path, style: str) -> None:
    root = make_workspace(tmp_path / "ws", [job("plain", "--steps", "200", "--interval", "0.02", style)])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "plain"})
        seen: dict[str, Any] = {}

        async def has_progress() -> bool:
            """The run's progress (its RunInfo keeps it once the run has ended: a loaded machine may
            let the 4 s run end between two polls)."""
            status = await client.call("arena/status", {})
            run = next((run for run in status["runs"] if run["runId"] == info["runId"]), None)
            if run and run["step"] and run["totalSteps"] == 200:
                seen.update(run)
            return bool(seen)

        await poll_until(has_progress, "progress parsed from plain lines", pause=0.02)
        assert seen["loss"] is not None
        await wait_status(client, info["runId"], "succeeded")
    finally:
        await finish(client)


async def test_job_patterns_and_metrics_survive_a_restart(tmp_path: Path) -> None:
    spec = job(
        "patterned",
        "--steps",
        "30",
        "--plain",
        "--ckpt-every",
        "10",
        progress={"pattern": r"step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>[0-9.]+)"},
        checkpoint={
            "pattern": r"@arena .*\"checkpoint\", \"step\": (?P<step>\d+), \"path\": \"(?P<path>[^\"]+)\""
        },
    )
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "patterned"})
        final = await wait_status(client, info["runId"], "succeeded")
        assert final["step"] == 30 and final["lastCheckpoint"]["step"] == 30
        metrics = await client.call("arena/metrics", {"runId": info["runId"]})
    finally:
        await stop_server(client)
    assert [p["step"] for p in metrics["points"]] == list(range(1, 31))
    assert [c["step"] for c in metrics["checkpoints"]] == [10, 20, 30]
    again = await start_server(root)
    try:
        assert await again.call("arena/metrics", {"runId": info["runId"]}) == metrics
        assert (await again.call("arena/metrics", {}))["runId"] == info["runId"]
    finally:
        await stop_server(again)


async def test_metrics_carry_the_announced_eval_losses(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("evals", "--steps", "20", "--eval-every", "10")])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "evals"})
        await wait_status(client, info["runId"], "succeeded")
        metrics = await client.call("arena/metrics", {"runId": info["runId"]})
    finally:
        await stop_server(client)
    assert [(e["step"], e["loss"]) for e in metrics["evals"]] == [(10, 0.4), (20, 0.2)]
    assert [p["step"] for p in metrics["points"]] == list(range(1, 21)), "evals are not progress"


# -- the reference trainer ---------------------------------------------------------------


def reference_workspace(root: Path) -> Path:
    pytest.importorskip("torch")
    (root / "training").mkdir(parents=True)
    shutil.copy(REPO / "training" / "train.py", root / "training" / "train.py")
    shutil.copytree(REPO / "training" / "data", root / "training" / "data")
    common = ["training/train.py", "--steps", "60", "--ckpt-every", "20", "--log-every", "1",
              "--batch-size", "4", "--eval-every", "1000", "--seed", "7"]  # fmt: skip
    jobs = [
        {"id": "ref", "kind": "train", "command": "{python}", "status": "ready",
         "script": "training/train.py",
         "args": [*common, "--ckpt-dir", "ckpt/ref"], "env": {"OMP_NUM_THREADS": "1"}, "resume": RESUME,
         "restart": {"maxRestarts": 2, "backoffSeconds": 0.2}},
        {"id": "clean", "kind": "train", "command": "{python}", "status": "ready",
         "script": "training/train.py",
         "args": [*common, "--ckpt-dir", "ckpt/clean"], "env": {"OMP_NUM_THREADS": "1"}, "resume": RESUME},
        {"id": "stoppable", "kind": "train", "command": "{python}", "status": "ready",
         "script": "training/train.py", "env": {"OMP_NUM_THREADS": "1"}, "resume": RESUME,
         "args": ["training/train.py", "--steps", "100000", "--ckpt-every", "20", "--batch-size", "4",
                  "--ckpt-dir", "ckpt/stoppable"]},
    ]  # fmt: skip
    (root / "training" / "manifest.json").write_text(json.dumps({"version": 1, "jobs": jobs}))
    return root


def losses(lines: list[dict[str, Any]]) -> dict[int, float]:
    result: dict[int, float] = {}
    for line in lines:
        if line["text"].startswith("@arena ") and '"progress"' in line["text"]:
            event = json.loads(line["text"][7:])
            result[event["step"]] = event["loss"]
    return result


async def test_reference_trainer_resumes_the_same_loss_curve(tmp_path: Path) -> None:
    root = reference_workspace(tmp_path / "ws")
    client = await start_server(root)
    try:
        clean = await client.call("arena/start", {"id": "clean"})
        await wait_status(client, clean["runId"], "succeeded", timeout=240)
        expected = losses(await all_logs(client, clean["runId"]))

        info = await client.call("arena/start", {"id": "ref"})

        def checkpointed() -> bool:
            return any(
                '"checkpoint", "step": 20' in line["text"]
                for batch in client.log_batches
                if batch["runId"] == info["runId"]
                for line in batch["lines"]
            )

        await wait_for(checkpointed, 240, what="the checkpoint at step 20")
        os.kill(info["pid"], signal.SIGKILL)
        final = await wait_status(client, info["runId"], "succeeded", "crashed", timeout=240)
        assert final["status"] == "succeeded" and final["restarts"] == 1
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        relaunch = next(t for t in texts if t.startswith("starting ref") and "--resume" in t)
        step = int(relaunch.rsplit("--start-step ", 1)[1])
        assert step >= 20
        got = losses(await all_logs(client, info["runId"]))
        after = {s: loss for s, loss in got.items() if s > step}
        assert after and all(after[s] == expected[s] for s in after), "the resumed run follows the same curve"
        reports = [v for v in progress_of(client) if isinstance(v, types.WorkDoneProgressReport)]
        assert any((r.percentage or 0) > 0 for r in reports)
    finally:
        await finish(client)


async def test_reference_trainer_stops_cooperatively_with_a_loadable_checkpoint(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    root = reference_workspace(tmp_path / "ws")
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "stoppable"})
        await wait_for(lambda: any('"progress"' in line["text"] for line in client.log_lines), 240)
        result = await client.call("arena/stop", {"confirm": True})
        assert result["status"] == "stopped" and result["stoppedBy"] == "file" and result["exitCode"] == 0
        announced = result["lastCheckpoint"]
        path = root / announced["path"]
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        assert checkpoint["step"] == announced["step"]
        assert "optimizer" in " ".join(checkpoint.keys())
        assert info["runId"] == result["runId"]
    finally:
        await finish(client)


async def test_a_relaunch_rewinds_the_step_to_its_checkpoint(tmp_path: Path) -> None:
    """Seen on a real H200: after a kill -9 at step 610 and a relaunch from the checkpoint at 600,
    ``step`` kept saying 610 until the resumed trainer printed progress; the steps past the
    checkpoint are lost, and the progress bar must say so at once."""
    spec = job(
        "lm", "--steps", "40", "--ckpt-every", "5", "--crash-at", "13", "--interval", "0.05",
        kind="train", resume=RESUME, restart={"maxRestarts": 1, "backoffSeconds": 2},
    )  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        await wait_for(lambda: "restarting" in client.status_of(run["runId"]), what="the relaunch")

        async def rewound() -> bool:
            active = (await client.call("arena/status", {}))["active"]
            return bool(active) and active["lastCheckpoint"] is not None and active["step"] == 10

        await poll_until(rewound, "step back at the checkpoint (10)")
    finally:
        await finish(client)
