"""The job lifecycle end to end: real arena-ls over stdio, real agents and trainers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from lsprotocol.types import ExecuteCommandParams

from arena_ls.run.capture_records import iter_records
from arena_ls.run.outputlog import STDOUT
from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    job,
    make_workspace,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
    write_manifest,
)

CAPABILITIES = ["visual-studio-code", "neovim"]


def jobs() -> list[dict[str, Any]]:
    return [
        job("quick", "--steps", "15", "--ckpt-every", "5", "--numbered"),
        job("slow", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5"),
        job("needs-ok", "--steps", "3", status="approval-required"),
        job("off", "--steps", "3", status="disabled"),
        job("exit3", "--steps", "2", "--exit-code", "3"),
        job(
            "stubborn",
            "--steps",
            "100000",
            "--interval",
            "0.05",
            "--ignore-stop",
            "--grandchildren",
            "2",
            stop={"method": "both", "graceSeconds": 1},
        ),
        job("train-slow", "--steps", "100000", "--interval", "0.05", kind="train", status="ready"),
        job("hygiene", "--steps", "1", "--hygiene"),
    ]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", jobs())


@pytest.fixture(params=CAPABILITIES)
async def client(request: pytest.FixtureRequest, workspace: Path) -> AsyncIterator[ArenaClient]:
    lsp = await start_server(workspace, capabilities=request.param)
    yield lsp
    await stop_active(lsp)
    await stop_server(lsp)


async def stop_active(lsp: ArenaClient) -> None:
    """Leave no run behind a test."""
    if lsp.stopped:
        return
    await lsp.call("arena/stop", {"kill": True, "confirm": True})


def run_count(root: Path) -> int:
    runs = root / ".aide" / "training" / "runs"
    return len(list(runs.iterdir())) if runs.exists() else 0


async def test_start_runs_to_success_with_logs(client: ArenaClient, workspace: Path) -> None:
    info = await client.call("arena/start", {"id": "quick"})
    assert info["status"] in ("running", "succeeded")
    assert isinstance(info["pid"], int) and isinstance(info["agentPid"], int)
    assert info["jobId"] == "quick" and info["runId"]
    final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
    assert final["status"] == "succeeded"
    assert final["exitCode"] == 0 and final["signal"] is None and final["failure"] is None
    assert final["lastCheckpoint"]["step"] == 15
    texts = [line["text"] for line in await all_logs(client, info["runId"])]
    assert [t for t in texts if t.startswith("numbered")] == [f"numbered {i}" for i in range(1, 16)]
    assert "job exited with code 0" in texts
    await wait_for(lambda: any(line["text"] == "numbered 15" for line in client.log_lines), what="arena/log")
    seqs = [line["seq"] for line in client.log_lines if line["stream"] != "arena" or "seq" in line]
    assert seqs == sorted(seqs)
    await wait_for(lambda: "succeeded" in client.status_of(info["runId"]), what="statusChanged")
    assert any("job exited with code 0" in m.message for m in client.log_messages)


async def test_every_contract_field_is_present(client: ArenaClient) -> None:
    info = await client.call("arena/start", {"id": "quick"})
    fields = {
        "runId", "jobId", "status", "pid", "agentPid", "startedAt", "endedAt", "exitCode", "signal",
        "stoppedBy", "failure", "restarts", "step", "totalSteps", "loss", "stepsPerSecond",
        "etaSeconds", "stalled", "lastCheckpoint", "logPath",
    }  # fmt: skip
    assert fields <= set(info)
    await wait_status(client, info["runId"], "succeeded")
    status = await client.call("arena/status", {})
    assert {"active", "runs", "jobs", "health", "logs"} <= set(status)
    job_info = next(j for j in status["jobs"] if j["id"] == "quick")
    assert set(job_info) >= {"id", "name", "kind", "status", "runnable", "blockedBy"}
    assert {"at", "ram", "cpu", "battery", "gpus", "gpuError"} <= set(status["health"])


async def test_refusals_start_nothing(client: ArenaClient, workspace: Path) -> None:
    error = await client.call_error("arena/start", {"id": "nope"})
    assert (error.code, error.data["reason"]) == (1001, "not-allowlisted")
    assert "quick" in error.data["known"]
    error = await client.call_error("arena/start", {"id": "needs-ok"})
    assert (error.code, error.data["reason"]) == (1002, "approval-required")
    error = await client.call_error("arena/start", {"id": "off"})
    assert (error.code, error.data["reason"]) == (1008, "disabled")
    assert run_count(workspace) == 0

    running = await client.call("arena/start", {"id": "slow"})
    error = await client.call_error("arena/start", {"id": "quick"})
    assert (error.code, error.data["reason"]) == (1003, "already-running")
    assert error.data["active"]["runId"] == running["runId"]
    assert error.data["active"].keys() >= running.keys() - {"tail"}, "the active run is a whole RunInfo"
    assert run_count(workspace) == 1

    (workspace / "training" / "manifest.json").write_text('{"version": 1, "jobs": [')
    error = await client.call_error("arena/start", {"id": "quick"})
    assert (error.code, error.data["reason"]) == (1006, "invalid-manifest")
    assert error.data["diagnostics"][0]["code"] == "AR101"
    assert run_count(workspace) == 1
    write_manifest(workspace, jobs())
    stopped = await client.call("arena/stop", {"runId": running["runId"], "kill": True, "confirm": True})
    assert stopped["status"] == "stopped"


async def test_approved_job_starts(client: ArenaClient) -> None:
    info = await client.call("arena/start", {"id": "needs-ok", "approved": True})
    final = await wait_status(client, info["runId"], "succeeded", "crashed")
    assert final["status"] == "succeeded"


async def test_cooperative_stop_by_file(client: ArenaClient, workspace: Path) -> None:
    info = await client.call("arena/start", {"id": "slow"})
    await wait_for(lambda: any(line["text"].startswith("@arena") for line in client.log_lines))
    result = await client.call("arena/stop", {"id": "slow", "confirm": True})
    assert result["status"] == "stopped"
    assert result["stoppedBy"] == "file"
    assert result["exitCode"] == 0
    assert any("stopping cooperatively" in line["text"] for line in result["tail"])
    assert len(result["tail"]) <= 20
    assert not psutil.pid_exists(info["pid"]) or psutil.Process(info["pid"]).status() == "zombie"
    assert (run_dir(workspace, info["runId"]) / "STOP").exists()
    await wait_for(lambda: "stopped" in client.status_of(info["runId"]), what="statusChanged stopped")
    assert "stopping" in client.status_of(info["runId"])


async def test_stop_kills_a_stubborn_tree_after_the_grace_window(client: ArenaClient) -> None:
    info = await client.call("arena/start", {"id": "stubborn"})
    await wait_for(lambda: any("spawned 2 grandchildren" in line["text"] for line in client.log_lines))

    def tree() -> list[psutil.Process]:
        try:
            return psutil.Process(info["pid"]).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    descendants = await wait_for(lambda: tree() if len(tree()) >= 4 else None, what="4 descendants")
    result = await client.call("arena/stop", {"id": "stubborn", "confirm": True})
    assert result["status"] == "stopped"
    assert result["stoppedBy"] == "kill"
    assert result["signal"] == "SIGKILL"
    for process in [psutil.Process(info["pid"]) if psutil.pid_exists(info["pid"]) else None, *descendants]:
        if process is None:
            continue
        assert not process.is_running() or process.status() == psutil.STATUS_ZOMBIE, process


async def test_kill_skips_the_cooperative_stage(client: ArenaClient) -> None:
    await client.call("arena/start", {"id": "slow"})
    result = await client.call("arena/stop", {"kill": True, "confirm": True})
    assert result["stoppedBy"] == "kill"
    assert result["status"] == "stopped"


async def test_exit_code_three_is_a_crash(client: ArenaClient) -> None:
    info = await client.call("arena/start", {"id": "exit3"})
    final = await wait_status(client, info["runId"], "crashed", "succeeded")
    assert final["status"] == "crashed"
    assert final["exitCode"] == 3
    assert final["failure"] == {"kind": "error", "evidence": "done"}, "the trainer's own last line"
    texts = [line["text"] for line in await all_logs(client, info["runId"])]
    assert "TRAINING_CRASHED: exit3 code 3" in texts
    await wait_for(lambda: any("TRAINING_CRASHED: exit3 code 3" in m.message for m in client.log_messages))
    await wait_for(lambda: any(m.type == 1 and "crashed" in m.message for m in client.messages))


async def test_stop_of_a_train_run_without_checkpoint_needs_confirm(client: ArenaClient) -> None:
    info = await client.call("arena/start", {"id": "train-slow"})
    error = await client.call_error("arena/stop", {"id": "train-slow"})
    assert (error.code, error.data["reason"]) == (1007, "no-checkpoint")
    assert error.data["runtimeSeconds"] >= 0
    result = await client.call("arena/stop", {"id": "train-slow", "confirm": True})
    assert result["runId"] == info["runId"] and result["status"] == "stopped"


async def test_stop_with_nothing_running_is_idle(client: ArenaClient) -> None:
    assert await client.call("arena/stop", {}) == {"status": "idle"}


async def test_execute_commands(client: ArenaClient) -> None:
    async def command(name: str, argument: dict[str, Any]) -> Any:
        return await client.call("workspace/executeCommand", ExecuteCommandParams(name, [argument]))

    info = await command("arena.start", {"id": "slow"})
    assert info["status"] == "running"
    status = await command("arena.status", {})
    assert status["active"]["runId"] == info["runId"]
    stopped = await command("arena.stop", {"runId": info["runId"], "confirm": True})
    assert stopped["status"] == "stopped"
    error = await client.call_error(
        "workspace/executeCommand", ExecuteCommandParams("arena.start", [{"id": 3}])
    )
    assert error.code == -32602 and "id" in error.message


INVALID = [
    ("arena/start", None, "id"),
    ("arena/start", [], "object"),
    ("arena/start", {}, "id"),
    ("arena/start", {"id": 1}, "id"),
    ("arena/start", {"id": "quick", "approved": "yes"}, "approved"),
    ("arena/start", {"id": "quick", "startStep": -1}, "startStep"),
    ("arena/start", {"id": "quick", "resume": "sometimes"}, "resume"),
    ("arena/stop", [1], "object"),
    ("arena/stop", {"kill": 1}, "kill"),
    ("arena/stop", {"graceSeconds": "soon"}, "graceSeconds"),
    ("arena/stop", {"runId": 7}, "runId"),
    ("arena/status", [1], "object"),
    ("arena/logs", {"limit": 0}, "limit"),
    ("arena/logs", {"cursor": 5}, "cursor"),
    ("arena/logs", {"cursor": "not-a-cursor"}, "cursor"),
    ("arena/logs", "text", "object"),
    ("arena/metrics", {"runId": []}, "runId"),
]


async def test_invalid_params_name_the_field(client: ArenaClient) -> None:
    for method, params, field in INVALID:
        error = await client.call_error(method, params)
        assert error.code == -32602, (method, params, error)
        assert field in error.message, (method, params, error.message)
        assert (await client.call("arena/status", {}))["jobs"], "the server must still answer"


async def test_requests_without_params_are_answered(client: ArenaClient) -> None:
    """A request with no ``params`` key at all still gets a response."""
    status = await client.call("arena/status")
    assert "jobs" in status
    error = await client.call_error("arena/start")
    assert error.code == -32602


async def test_log_hygiene(client: ArenaClient) -> None:
    info = await client.call("arena/start", {"id": "hygiene"})
    await wait_status(client, info["runId"], "succeeded")
    lines = await all_logs(client, info["runId"])
    texts = [line["text"] for line in lines]
    assert "red text plain" in texts
    assert "progress 100%" in texts
    assert "bad bytes \ufffd\ufffd here" in texts
    assert "split line part one and part two" in texts
    long_line = next(t for t in texts if t.startswith("xxxx"))
    assert long_line.startswith("x" * 65536) and "line cut" in long_line
    assert len(long_line) < 70_000
    assert texts.index("after the long line") == texts.index(long_line) + 1
    assert [line["seq"] for line in lines] == list(range(len(lines)))
    # The log file holds the trainer's streams and the agent's own records, a record per chunk
    # (``run/outputlog.py``): a line split across two reads of the pipe may have an agent record
    # between its pieces (seen beside two CPU hogs: a note the agent wrote while it loaded). What is
    # on disk, stream by stream, is the whole line.
    records = iter_records(Path(info["logPath"]).parent)
    stdout = b"".join(data for _, stream, _, data, _ in records if stream == STDOUT)
    assert b"x" * (1024 * 1024) + b"\n" in stdout, "the file on disk keeps everything"


async def test_logs_cursor_pages_in_order(client: ArenaClient) -> None:
    info = await client.call("arena/start", {"id": "quick"})
    await wait_status(client, info["runId"], "succeeded")
    one_by_one = await all_logs(client, info["runId"], limit=1)
    at_once = await all_logs(client, info["runId"], limit=1000)
    assert [line["seq"] for line in one_by_one] == [line["seq"] for line in at_once]
    page = await client.call("arena/logs", {"runId": info["runId"], "limit": 10000})
    assert page["done"] is True
    json.dumps(page)


async def test_shutdown_leaves_the_run_going_and_a_new_server_adopts_it(workspace: Path) -> None:
    first = await start_server(workspace)
    info = await first.call("arena/start", {"id": "slow"})
    await stop_server(first)
    assert psutil.Process(info["pid"]).is_running()
    second = await start_server(workspace, capabilities="neovim")
    try:
        status = await second.call("arena/status", {})
        assert status["active"]["runId"] == info["runId"]
        assert status["active"]["pid"] == info["pid"]
        assert status["active"]["status"] == "running"
        result = await second.call("arena/stop", {"confirm": True})
        assert result["runId"] == info["runId"] and result["status"] == "stopped"
    finally:
        await stop_server(second)
