"""Issue 23, end to end with a real arena-ls, real agents and real trainers: the supervisor
never relaunches a trainer in the direction that overwrites its checkpoint.

Each test ends with the checkpoint file intact: the same bytes, or a newer step.
"""

from __future__ import annotations

import contextlib
import json
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
    start_server,
    stop_server,
    wait_status,
    write_manifest,
)

TRAINERS = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
CKPT = "checkpoints/ckpt.json"


def _workspace(root: Path, script: str, *args: str) -> Path:
    root.mkdir(parents=True)
    shutil.copy(TRAINERS / script, root / script)
    write_manifest(
        root,
        [
            {
                "id": "lm",
                "kind": "train",
                "command": "{python}",
                "args": [script, *args],
                "script": script,
                "status": "ready",
                "resume": RESUME,
                "stop": {"method": "file", "graceSeconds": 30},
                "restart": {"maxRestarts": 3, "backoffSeconds": 0},
            }
        ],
    )
    return root


def _checkpoint(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / CKPT).read_text(encoding="utf-8")))


async def _step_at_least(client: ArenaClient, run_id: str, step: int) -> dict[str, Any]:
    """The run's RunInfo once its announced step reached ``step``."""
    while True:
        info = await wait_status(client, run_id, "running")
        if (info.get("step") or 0) >= step:
            return info


async def _final(client: ArenaClient, run_id: str) -> dict[str, Any]:
    return await wait_status(client, run_id, "crashed", "succeeded", "stopped", "lost", timeout=120)


async def _arena_lines(client: ArenaClient, run_id: str) -> list[str]:
    return [line["text"] for line in await all_logs(client, run_id) if line["stream"] == "arena"]


@pytest.fixture(params=["spare", "no-spare"])
async def stop_only(
    tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[ArenaClient, Path]]:
    root = _workspace(tmp_path / "ws", "stop_only_trainer.py", "--ckpt-every", "100")
    env = {"ARENA_NO_SPARE_AGENT": "1"} if request.param == "no-spare" else None
    client = await start_server(root, env=env)
    yield client, root
    with contextlib.suppress(Exception):
        await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


async def test_a_kill_after_a_resume_never_relaunches_from_scratch_over_a_silent_checkpoint(
    stop_only: tuple[ArenaClient, Path],
) -> None:
    """Case 1: stop-only announcements, stop (announces S), resume from S, kill -9 after a
    silent save: the relaunch goes to S (never step 0); the trainer, finding a newer file,
    refuses, and the run ends resume-refused with the newer checkpoint intact."""
    client, root = stop_only
    first = await client.call("arena/start", {"id": "lm"})
    await _step_at_least(client, first["runId"], 250)
    stopped = await client.call("arena/stop", {"confirm": True})
    assert stopped["status"] == "stopped"
    announced = stopped["lastCheckpoint"]["step"]
    assert _checkpoint(root)["step"] == announced

    second = await client.call("arena/start", {"id": "lm"})
    assert second["resumedFromStep"] == announced
    spec = json.loads((root / ".aide/training/runs" / second["runId"] / "spec.json").read_text())
    assert spec["jobCheckpoint"]["step"] == announced, "the run knows the job's checkpoint"
    silent = (announced // 100 + 1) * 100  # the next silent save after the resume
    info = await _step_at_least(client, second["runId"], silent + 10)
    assert _checkpoint(root)["step"] >= silent, "the trainer saved silently past its announced step"
    os.kill(info["pid"], signal.SIGKILL)

    final = await _final(client, second["runId"])
    lines = await _arena_lines(client, second["runId"])
    assert not any("from scratch" in line for line in lines), lines
    assert f"restarting from step {announced} (attempt 1/3) in 0s" in lines
    assert final["status"] == "crashed"
    assert final["failure"]["kind"] == "resume-refused"
    assert "checkpoint is at step" in final["failure"]["evidence"]
    saved = _checkpoint(root)
    assert saved["step"] >= silent, f"the newer checkpoint was overwritten: {saved}"


@pytest.fixture
async def refusing(tmp_path: Path) -> AsyncIterator[tuple[ArenaClient, Path]]:
    root = _workspace(tmp_path / "ws", "refusing_trainer.py", "--steps", "600")
    client = await start_server(root)
    yield client, root
    with contextlib.suppress(Exception):
        await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


async def test_a_start_step_the_trainer_refuses_is_never_relaunched_from_scratch(
    refusing: tuple[ArenaClient, Path],
) -> None:
    """Case 2: the job finished at step 600; a start at step 50 (confirmed) makes the trainer
    refuse (exit 2): the run ends resume-refused, not relaunched, the checkpoint the same bytes."""
    client, root = refusing
    first = await client.call("arena/start", {"id": "lm"})
    done = await _final(client, first["runId"])
    assert (done["status"], done["step"], done["totalSteps"]) == ("succeeded", 600, 600)
    before = (root / CKPT).read_bytes()

    mismatch = await client.call_error("arena/start", {"id": "lm", "startStep": 50})
    assert (mismatch.code, mismatch.data["reason"], mismatch.data["asked"]) == (
        1011,
        "checkpoint-mismatch",
        50,
    )
    last = mismatch.data["lastCheckpoint"]
    assert (last["step"], last["path"], last["runId"]) == (600, CKPT, first["runId"])
    assert (await client.call("arena/status", {}))["active"] is None, "a refusal starts nothing"
    asked = await client.call("arena/start", {"id": "lm", "startStep": 50, "confirm": True})
    final = await _final(client, asked["runId"])
    lines = await _arena_lines(client, asked["runId"])
    assert not any(line.startswith("restarting") for line in lines), lines
    assert final["status"] == "crashed" and final["restarts"] == 0
    assert final["failure"]["kind"] == "resume-refused"
    assert final["failure"]["evidence"] == "error: checkpoint is at step 600, not 50"
    assert (root / CKPT).read_bytes() == before, "the finished checkpoint was overwritten"


def _job_info(status: dict[str, Any]) -> dict[str, Any]:
    return dict(next(job for job in status["jobs"] if job["id"] == "lm"))


async def test_the_jobs_checkpoint_is_known_across_runs_and_a_fresh_start_never_relaunches_over_a_saved_file(
    stop_only: tuple[ArenaClient, Path],
) -> None:
    """JobInfo.lastCheckpoint names the run that announced it and goes to the next run's spec;
    ``resume: false`` begins the job anew (null), and a crash of the fresh run before it
    announces anything is ``resume-unknown`` (the file it saved is named), never a relaunch
    from step 0 over that file."""
    client, root = stop_only
    status = await client.call("arena/status", {})
    assert _job_info(status)["lastCheckpoint"] is None
    first = await client.call("arena/start", {"id": "lm"})
    await _step_at_least(client, first["runId"], 50)
    stopped = await client.call("arena/stop", {"confirm": True})
    announced = stopped["lastCheckpoint"]
    known = _job_info(await client.call("arena/status", {}))["lastCheckpoint"]
    assert known == {**announced, "runId": first["runId"]}

    fresh = await client.call("arena/start", {"id": "lm", "resume": False})
    assert "--resume" not in fresh["argv"]
    assert _job_info(await client.call("arena/status", {}))["lastCheckpoint"] is None
    spec = json.loads((root / ".aide/training/runs" / fresh["runId"] / "spec.json").read_text())
    assert spec["jobCheckpoint"] is None and spec["checkpointPaths"] == [CKPT]
    info = await _step_at_least(client, fresh["runId"], 110)
    assert _checkpoint(root)["step"] >= 100, "the fresh run saved silently"
    os.kill(info["pid"], signal.SIGKILL)

    final = await _final(client, fresh["runId"])
    lines = await _arena_lines(client, fresh["runId"])
    assert not any(line.startswith("restarting") for line in lines), lines
    assert (final["status"], final["restarts"]) == ("crashed", 0)
    assert final["failure"]["kind"] == "resume-unknown"
    assert final["failure"]["evidence"].startswith(f"{CKPT} exists")
    assert _checkpoint(root)["step"] >= 100, "the fresh run's save was overwritten"


async def test_a_start_of_a_finished_job_is_refused_unless_fresh_or_confirmed(
    refusing: tuple[ArenaClient, Path],
) -> None:
    """1012 already-finished: the job's last run succeeded at its last step."""
    client, root = refusing
    first = await client.call("arena/start", {"id": "lm"})
    await _final(client, first["runId"])
    before = (root / CKPT).read_bytes()

    finished = await client.call_error("arena/start", {"id": "lm"})
    assert (finished.code, finished.data["reason"]) == (1012, "already-finished")
    run = finished.data["run"]
    assert (run["runId"], run["status"], run["step"], run["totalSteps"]) == (
        first["runId"],
        "succeeded",
        600,
        600,
    )
    assert (root / CKPT).read_bytes() == before
    bad = await client.call_error("arena/start", {"id": "lm", "confirm": "yes"})
    assert bad.code == -32602 and "confirm" in bad.message

    confirmed = await client.call("arena/start", {"id": "lm", "confirm": True})
    assert confirmed["argv"][-3:] == ["--resume", "--start-step", "600"]
    again = await _final(client, confirmed["runId"])
    assert again["status"] == "succeeded"
    assert (root / CKPT).read_bytes() == before, "resumed at its last step, it trained no further"

    fresh = await client.call("arena/start", {"id": "lm", "resume": False})
    assert "--resume" not in fresh["argv"]
    assert (await _final(client, fresh["runId"]))["status"] == "succeeded"


@pytest.fixture
async def checkpointing(tmp_path: Path) -> AsyncIterator[ArenaClient]:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(TRAINERS / "fake_trainer.py", root / "fake_trainer.py")
    args = ["fake_trainer.py", "--steps", "100000", "--interval", "0.03", "--ckpt-every", "20"]
    write_manifest(
        root,
        [{"id": "lm", "kind": "train", "command": "{python}", "args": args, "script": "fake_trainer.py",
          "status": "ready", "resume": RESUME}],
    )  # fmt: skip
    client = await start_server(root)
    yield client
    with contextlib.suppress(Exception):
        await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


KILL_ATTEMPTS = 5


async def _kill_past_a_checkpoint(client: ArenaClient) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Start ``lm``, kill it once it is 5 steps past a checkpoint: (run, its final RunInfo, the
    checkpoint's step seen before the kill). The trainer saves every 20 steps (0.6 s): on a loaded
    machine the kill can land after its next save, which then loses nothing."""
    run = await client.call("arena/start", {"id": "lm"})
    assert run["lost"] is None
    while True:
        info = await _step_at_least(client, run["runId"], 25)
        checkpoint = info["lastCheckpoint"]
        if checkpoint is not None and info["step"] >= checkpoint["step"] + 5:
            break
    killed = await client.call("arena/stop", {"kill": True})
    assert (killed["status"], killed["stoppedBy"]) == ("stopped", "kill")
    return run, killed, int(checkpoint["step"])


async def test_a_kill_past_the_last_checkpoint_says_what_it_lost(checkpointing: ArenaClient) -> None:
    """``lost``: a stop --kill at a step past the last checkpoint lost those steps; a cooperative
    stop that saved one lost nothing; a running run has null."""
    client = checkpointing
    for _ in range(KILL_ATTEMPTS):
        run, killed, seen = await _kill_past_a_checkpoint(client)
        steps = killed["step"] - killed["lastCheckpoint"]["step"]
        assert killed["lost"]["steps"] == steps
        if killed["lastCheckpoint"]["step"] == seen:
            break  # else the trainer saved again before the kill landed (a loaded machine): again
    else:
        pytest.fail(f"every one of {KILL_ATTEMPTS} kills landed just after a new checkpoint")
    assert steps >= 5
    assert killed["lost"]["seconds"] > 0
    listed = next(r for r in (await client.call("arena/status", {}))["runs"] if r["runId"] == run["runId"])
    assert listed["lost"] == killed["lost"]

    again = await client.call("arena/start", {"id": "lm"})
    await _step_at_least(client, again["runId"], killed["lastCheckpoint"]["step"] + 2)
    stopped = await client.call("arena/stop", {})
    assert stopped["stoppedBy"] == "file" and stopped["lost"] == {"steps": 0, "seconds": 0.0}
