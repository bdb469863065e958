"""Stalls an expert would act on (contract 8.2), end to end: a real server, agents and trainers.

A trainer that hangs in a sleep after a few fast steps is stalled within its
adaptive threshold (``watchdog.stallMinSeconds`` set low here), with the
trainer's Python stack (``py-spy dump``) in the evidence; with
``watchdog.stallAction`` ``restart`` it is stopped and relaunched from its
last checkpoint, counted as a relaunch. A trainer spinning in a busy loop is
only warned about ("still working"), never restarted.

CI runs as root, so py-spy can read the trainer; elsewhere a permission
failure, said as such, is accepted in place of the stack.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.helpers.fake_hardware import write_fake_hardware
from tests.helpers.lsp import (
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
from tests.lsp.test_health_and_preflight import fake_client

FAST = ["--steps", "30", "--interval", "0.05", "--ckpt-every", "3"]
STALL = {"stallMinSeconds": 5}
"""10 x a 0.05 s step is 0.5 s: the floor, 5 s, is the threshold (a loaded machine's pauses stay under it)."""
RELAUNCH = {"maxRestarts": 3, "backoffSeconds": 0.2}
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def stalled_info(client: ArenaClient, run_id: str) -> dict[str, Any] | None:
    """The first RunInfo of the run that says it is stalled where the trainer stops (its last line
    in the evidence): a loaded machine's pause between two early steps, judged first, is not it."""
    for info in client.statuses:
        failure = info.get("failure") or {}
        where = "ing at step 7" in str(failure.get("evidence"))  # hanging / spinning at step 7
        if info["runId"] == run_id and info["stalled"] and failure.get("kind") == "stalled" and where:
            return info
    return None


def assert_stack_in(evidence: str, texts: list[str], function: str) -> None:
    """The trainer's stack is in the log and the failure's evidence, or (not root) why it is not."""
    if any(t.startswith("stacks of the trainer (py-spy dump --pid") for t in texts):
        assert any(function in t and "fake_trainer.py" in t for t in texts), texts
        assert f"{function} (fake_trainer.py:" in evidence, evidence
        return
    assert not ROOT, f"as root py-spy must read the trainer: {texts}"
    assert any(t.startswith("no stack of the trainer: permission denied") for t in texts), texts
    assert "no stack: permission denied" in evidence, evidence


async def cleanup(client: ArenaClient) -> None:
    if not client.stopped:
        await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)


async def test_a_trainer_hung_in_a_sleep_is_stalled_with_its_stack(tmp_path: Path) -> None:
    spec = job("hangs", *FAST, "--hang-at", "7", kind="train", restart=RELAUNCH)
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root, init_options={"watchdog": STALL})
    try:
        info = await client.call("arena/start", {"id": "hangs"})
        stalled = await wait_for(lambda: stalled_info(client, info["runId"]), what="the stalled verdict")
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert stalled["status"] == "running" and stalled["restarts"] == 0
        warning = next(t for t in texts if t.startswith("warning: no progress announced"))
        assert "the trainer is idle" in warning and "the trainer is stalled" in warning, warning
        assert "restarting" not in warning
        assert_stack_in(stalled["failure"]["evidence"], texts, "hang_in_sleep")
        assert "hanging at step 7" in stalled["failure"]["evidence"]  # the last line goes with it
    finally:
        await cleanup(client)


async def test_a_hung_trainer_with_stall_action_restart_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    spec = job("hangs", *FAST, "--hang-at", "7", kind="train", restart=RELAUNCH, stop={"graceSeconds": 1})
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root, init_options={"watchdog": {**STALL, "stallAction": "restart"}})
    try:
        info = await client.call("arena/start", {"id": "hangs"})
        stalled = await wait_for(lambda: stalled_info(client, info["runId"]), what="the stalled verdict")
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "stopped", "lost")
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert final["status"] == "succeeded" and final["restarts"] == 1, final
        assert final["step"] == 30 and final["failure"] is None
        assert_stack_in(stalled["failure"]["evidence"], texts, "hang_in_sleep")
        assert any("restarting it from its last checkpoint" in t for t in texts), texts
        assert "restarting from step 6 (attempt 1/3) in 0.2s" in texts
        relaunched = [t for t in texts if t.startswith("argv: ") and "--resume" in t]
        assert len(relaunched) == 1 and relaunched[0].endswith('"--resume", "--start-step", "6"]'), texts
        statuses = client.status_of(info["runId"])
        assert "stopping" in statuses and "restarting" in statuses
        assert statuses.index("stopping") < statuses.index("restarting")
    finally:
        await cleanup(client)


async def test_a_trainer_in_a_busy_loop_is_only_warned_about_never_restarted(tmp_path: Path) -> None:
    spec = job("spins", *FAST, "--spin-at", "7", kind="train", restart=RELAUNCH, stop={"graceSeconds": 1})
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root, init_options={"watchdog": {**STALL, "stallAction": "restart"}})
    try:
        info = await client.call("arena/start", {"id": "spins"})
        stalled = await wait_for(lambda: stalled_info(client, info["runId"]), what="the stalled verdict")
        assert "still working (its CPU time grew" in stalled["failure"]["evidence"]

        texts: list[str] = []

        async def judged_again() -> bool:  # the next threshold's judgement, on a fresh window
            texts[:] = [line["text"] for line in await all_logs(client, info["runId"])]
            return any(t.startswith("still silent:") for t in texts)

        await poll_until(judged_again, "a second judgement", pause=0.5)
        warning = next(t for t in texts if t.startswith("warning: no progress announced"))
        assert "still working" in warning and "not restarted" in warning, warning
        assert_stack_in(stalled["failure"]["evidence"], texts, "spin_in_busy_loop")
        now = await client.call("arena/status", {})
        run = next(r for r in now["runs"] if r["runId"] == info["runId"])
        assert run["status"] == "running" and run["restarts"] == 0 and run["pid"] == info["pid"]
        assert not any(t.startswith("restarting from") for t in texts)
    finally:
        await cleanup(client)


async def test_a_silent_trainer_on_a_busy_gpu_is_never_restarted(tmp_path: Path) -> None:
    """The GPU is faked (``tests/helpers/fake_hardware.py``, followed by the agent): the trainer's
    process holds memory on a GPU 90% busy while its CPU sleeps (a long kernel, say)."""
    spec = job("waits", *FAST, "--hang-at", "7", kind="train", restart=RELAUNCH, stop={"graceSeconds": 1})
    root = make_workspace(tmp_path / "ws", [spec])
    client, hardware = await fake_client(
        root, {}, init_options={"watchdog": {**STALL, "stallAction": "restart"}}
    )
    try:
        info = await client.call("arena/start", {"id": "waits"})
        busy = {"index": 0, "utilization": 90, "processes": [{"pid": info["pid"], "usedMemoryMb": 3000}]}
        write_fake_hardware(hardware, {"gpus": [busy]})
        stalled = await wait_for(lambda: stalled_info(client, info["runId"]), what="the stalled verdict")
        evidence = stalled["failure"]["evidence"]
        assert "still working (its GPU is busy" in evidence and "GPU busy up to 90%" in evidence, evidence
        texts: list[str] = []

        async def judged_again() -> bool:
            texts[:] = [line["text"] for line in await all_logs(client, info["runId"])]
            return any(t.startswith("still silent:") for t in texts)

        await poll_until(judged_again, "a second judgement", pause=0.5)
        now = await client.call("arena/status", {})
        run = next(r for r in now["runs"] if r["runId"] == info["runId"])
        assert run["status"] == "running" and run["restarts"] == 0 and run["pid"] == info["pid"]
    finally:
        await cleanup(client)
