"""Windows variants of the tests that assume POSIX signals, and what only Windows can show.

Skipped here (Linux): they need Windows (job objects, console groups, real
sharing violations, ``taskkill``). They are meant for the Windows runner of
``.github/workflows/windows.yml``, which has not run in this project's own
environment (see docs/windows.md).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.lsp import all_logs, job, make_workspace, start_server, stop_server, wait_for, wait_status

pytestmark = pytest.mark.skipif(
    sys.platform != "win32", reason="Windows only: job objects, console groups, sharing violations, taskkill"
)


async def _cleanup(client: Any) -> None:
    if not client.stopped:
        await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)


async def test_stop_kills_a_stubborn_tree_through_its_job(tmp_path: Path) -> None:
    """POSIX variant: tests/lifecycle/test_lifecycle.py (there the tree dies by SIGKILL)."""
    spec = job("stubborn", "--steps", "100000", "--interval", "0.05", "--ignore-stop", "--grandchildren", "2",
               stop={"method": "both", "graceSeconds": 1})  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "stubborn"})
        await wait_for(lambda: any("spawned 2 grandchildren" in line["text"] for line in client.log_lines))
        descendants = psutil.Process(info["pid"]).children(recursive=True)
        result = await client.call("arena/stop", {"id": "stubborn", "confirm": True})
        assert result["stoppedBy"] == "kill" and result["signal"] is None and result["exitCode"] == 1
        for process in descendants:
            assert not process.is_running(), process
    finally:
        await _cleanup(client)


async def test_the_signal_stage_sends_nothing_and_the_stop_file_stops_the_trainer(tmp_path: Path) -> None:
    root = make_workspace(
        tmp_path / "ws", [job("slow", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5",
                              stop={"method": "both"})]
    )  # fmt: skip
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "slow"})
        await wait_for(lambda: any('"checkpoint"' in line["text"] for line in client.log_lines))
        result = await client.call("arena/stop", {"id": "slow", "confirm": True})
        assert result["status"] == "stopped" and result["stoppedBy"] == "file" and result["exitCode"] == 0
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert any(text.startswith("no stop signal on this system") for text in texts)
    finally:
        await _cleanup(client)


async def test_taskkill_of_the_server_tree_leaves_the_run_alive(tmp_path: Path) -> None:
    """What vscode-languageclient does when the server does not exit within 2 s."""
    root = make_workspace(
        tmp_path / "ws", [job("ticker", "--steps", "300", "--interval", "0.02", "--numbered")]
    )
    first = await start_server(root)
    info = await first.call("arena/start", {"id": "ticker"})
    subprocess.run(["taskkill", "/T", "/F", "/PID", str(first.server_process.pid)], check=False)
    await first.stop()
    assert psutil.pid_exists(info["pid"]) and psutil.pid_exists(info["agentPid"])
    second = await start_server(root)
    try:
        final = await wait_status(second, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded"
    finally:
        await _cleanup(second)


async def test_a_reader_holding_state_json_open_costs_nothing(tmp_path: Path) -> None:
    """A real sharing violation: a plain open() (no FILE_SHARE_DELETE) held while the agent writes."""
    root = make_workspace(
        tmp_path / "ws", [job("ticker", "--steps", "300", "--interval", "0.01", "--numbered")]
    )
    client = await start_server(root)
    stop = threading.Event()
    try:
        info = await client.call("arena/start", {"id": "ticker"})
        state = Path(info["logPath"]).with_name("state.json")

        def hold() -> None:
            while not stop.is_set():
                try:
                    with open(state, "rb"):
                        stop.wait(0.05)
                except OSError:
                    stop.wait(0.001)

        threading.Thread(target=hold, daemon=True).start()
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded"
        numbered = [
            ln["text"] for ln in await all_logs(client, info["runId"]) if ln["text"].startswith("numbered")
        ]
        assert numbered == [f"numbered {i}" for i in range(1, 301)]
    finally:
        stop.set()
        await _cleanup(client)


async def test_non_ascii_output_reaches_the_log_as_utf8(tmp_path: Path) -> None:
    """With stdout a pipe, Windows Python would use the ANSI code page (print('✓') would crash)."""
    root = make_workspace(tmp_path / "ws", [job("uni", "--steps", "0", "--unicode")])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "uni"})
        final = await wait_status(client, info["runId"], "succeeded", "crashed")
        assert final["status"] == "succeeded"
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert "unicode \u2713 stdout=utf-8" in texts
    finally:
        await _cleanup(client)


async def test_terminating_the_agent_takes_the_trainer_down_through_its_job(tmp_path: Path) -> None:
    """POSIX variant: test_kill_9_of_the_agent_takes_the_trainer_down (there by PDEATHSIG)."""
    root = make_workspace(tmp_path / "ws", [job("slow", "--steps", "100000", "--interval", "0.05")])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "slow"})
        psutil.Process(info["agentPid"]).kill()  # TerminateProcess: the agent's job handle closes
        final = await wait_status(client, info["runId"], "lost")
        assert "agent" in final["failure"]["evidence"]
        await wait_for(lambda: not psutil.pid_exists(info["pid"]), what="the trainer to go down")
    finally:
        await _cleanup(client)


async def test_terminating_the_trainer_relaunches_from_its_checkpoint(tmp_path: Path) -> None:
    """POSIX variant: test_kill_9_of_the_trainer_relaunches_from_its_checkpoint (there SIGKILL)."""
    spec = job("resumable", "--steps", "100000", "--interval", "0.02", "--ckpt-every", "5",
               kind="train", restart={"maxRestarts": 3, "backoffSeconds": 0.2})  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "resumable"})
        await wait_for(lambda: any('"checkpoint", "step": 10' in line["text"] for line in client.log_lines))
        psutil.Process(info["pid"]).kill()
        relaunched = await wait_for(
            lambda: next(
                (s for s in client.statuses if s["restarts"] == 1 and s["status"] == "running"), None
            ),
            what="relaunch",
        )
        step = relaunched["argv"][relaunched["argv"].index("--start-step") + 1]
        assert int(step) >= 10 and relaunched["pid"] != info["pid"]
    finally:
        await _cleanup(client)
