"""Fault injection: the supervisor never loses a run, a line, or a process.

Each test injects one fault into real processes (kill -9 of the server, the
trainer or the agent; a reused pid; a corrupt state file; two servers; a
flood) and checks what the contract guarantees afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    job,
    kill_server,
    make_workspace,
    poll_until,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

FAST_RESTART = {"maxRestarts": 3, "backoffSeconds": 0.2}
FLOOD_DEADLINE_S = 150.0
"""How long a million-line flood may take to end: it bounds a broken test only (pytest's own
limit is 180 s), and the time it took is never asserted."""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def started(client: ArenaClient, job_id: str, **params: Any) -> dict[str, Any]:
    info: dict[str, Any] = await client.call("arena/start", {"id": job_id, **params})
    return info


async def cleanup(client: ArenaClient) -> None:
    if not client.stopped:
        await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)


async def test_kill_9_of_the_server_loses_no_line(tmp_path: Path) -> None:
    root = make_workspace(
        tmp_path / "ws", [job("ticker", "--steps", "400", "--interval", "0.005", "--numbered")]
    )
    first = await start_server(root)
    info = await started(first, "ticker")
    await wait_for(lambda: any(line["text"] == "numbered 30" for line in first.log_lines), what="line 30")
    await kill_server(first)
    assert not gone(info["pid"]), "the run must survive its server"
    second = await start_server(root)
    try:
        final = await wait_status(second, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded" and final["pid"] == info["pid"]
        numbered = [
            line["text"]
            for line in await all_logs(second, info["runId"], limit=97)
            if line["text"].startswith("numbered")
        ]
        assert numbered == [f"numbered {i}" for i in range(1, 401)]
    finally:
        await cleanup(second)


async def test_kill_9_of_the_trainer_relaunches_from_its_checkpoint(tmp_path: Path) -> None:
    spec = job("resumable", "--steps", "100000", "--interval", "0.02", "--ckpt-every", "5",
               kind="train", restart=FAST_RESTART)  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await started(client, "resumable")
        await wait_for(lambda: any('"checkpoint", "step": 10' in line["text"] for line in client.log_lines))
        os.kill(info["pid"], signal.SIGKILL)
        relaunched = await wait_for(
            lambda: next(
                (s for s in client.statuses if s["restarts"] == 1 and s["status"] == "running"), None
            ),
            what="relaunch",
        )
        assert "restarting" in client.status_of(info["runId"])
        step = relaunched["argv"][relaunched["argv"].index("--start-step") + 1]
        assert relaunched["argv"][-3:] == ["--resume", "--start-step", step]
        assert int(step) >= 10 and relaunched["pid"] != info["pid"]
        first_after = await wait_for(
            lambda: next(
                (json.loads(line["text"][7:])["step"] for line in client.log_lines
                 if line["text"].startswith("@arena") and '"progress"' in line["text"]
                 and line["seq"] > _seq_of(client, "starting resumable") ), None),
            what="progress after the relaunch",
        )  # fmt: skip
        assert first_after == int(step) + 1
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert any(t.startswith("failure: killed") for t in texts)
        assert any(t.startswith(f"restarting from step {step} (attempt 1/3)") for t in texts)
    finally:
        await cleanup(client)


def _seq_of(client: ArenaClient, prefix: str) -> int:
    starts = [line["seq"] for line in client.log_lines if line["text"].startswith(prefix)]
    return starts[-1] if len(starts) >= 2 else 10**9


async def test_a_crash_loop_ends_the_run(tmp_path: Path) -> None:
    spec = job("crasher", "--steps", "50", "--crash-at", "1", kind="train", restart=FAST_RESTART)
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await started(client, "crasher")
        final = await wait_status(client, info["runId"], "crashed", "succeeded")
        assert final["failure"]["kind"] == "crash-loop"
        assert final["restarts"] == 1
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert sum(t.startswith("TRAINING_CRASHED") for t in texts) == 2
        assert any("crash loop" in t for t in texts)
    finally:
        await cleanup(client)


async def test_crashes_with_progress_restore_the_budget(tmp_path: Path) -> None:
    spec = job("flaky", "--steps", "24", "--interval", "0.01", "--ckpt-every", "2",
               "--crash-after-progress", "5", kind="train",
               restart={"maxRestarts": 1, "backoffSeconds": 0.05})  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await started(client, "flaky")
        final = await wait_status(client, info["runId"], "succeeded", "crashed")
        assert final["status"] == "succeeded", final
        assert final["restarts"] >= 3
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        delays = [float(t.rsplit(" in ", 1)[1].rstrip("s")) for t in texts if t.startswith("restarting")]
        assert delays == sorted(delays) and delays[1] == 2 * delays[0], "the backoff doubles"
    finally:
        await cleanup(client)


async def test_oom_and_sigkill_are_classified(tmp_path: Path) -> None:
    root = make_workspace(
        tmp_path / "ws",
        [job("oom", "--steps", "10", "--oom", kind="train", restart={"maxRestarts": 0}),
         job("sigkill", "--steps", "10", "--sigkill-self-at", "2"),
         job("nan", "--steps", "10", "--nan-at", "3", kind="train", restart={"maxRestarts": 0})],
    )  # fmt: skip
    client = await start_server(root)
    try:
        for job_id, kind, evidence in [
            ("oom", "oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
            ("sigkill", "killed", None),
            ("nan", "nan", None),
        ]:
            info = await started(client, job_id)
            final = await wait_status(client, info["runId"], "crashed", "succeeded")
            assert final["failure"]["kind"] == kind, final
            if evidence:
                assert final["failure"]["evidence"] == evidence
            if kind == "killed":  # a kill -9 is not called an OOM when the kernel's count says otherwise
                said = final["failure"]["evidence"]
                assert "kill -9" in said or "OOM killer ended" in said, said
        assert final["exitCode"] == 1
    finally:
        await cleanup(client)


def _fake_run(root: Path, run_id: str, state: dict[str, Any]) -> Path:
    folder = run_dir(root, run_id)
    folder.mkdir(parents=True)
    spec = {"runId": run_id, "jobId": "ghost", "jobName": "ghost", "kind": "task", "argv": ["x"],
            "cwd": str(root), "createdAt": time.time() - 3600}  # fmt: skip
    (folder / "spec.json").write_text(json.dumps(spec))
    (folder / "state.json").write_text(json.dumps({"runId": run_id, "jobId": "ghost", **state}))
    return folder


async def test_a_reused_pid_is_never_adopted(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "2")])
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        created = psutil.Process(stranger.pid).create_time()
        _fake_run(root, "ghost-1", {"status": "running", "pid": stranger.pid, "pidCreateTime": created - 500,
                                    "agentPid": stranger.pid, "agentCreateTime": created - 500})  # fmt: skip
        (root / ".aide" / "training" / "active.lock").write_text("ghost-1")
        client = await start_server(root)
        try:
            status = await client.call("arena/status", {})
            ghost = next(r for r in status["runs"] if r["runId"] == "ghost-1")
            assert ghost["status"] == "lost"
            assert status["active"] is None
            assert stranger.poll() is None, "the unrelated process is untouched"
            info = await started(client, "quick")
            await wait_status(client, info["runId"], "succeeded")
        finally:
            await cleanup(client)
    finally:
        stranger.kill()
        stranger.wait()


async def test_a_corrupt_state_file_does_not_hide_a_healthy_run(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("slow", "--steps", "100000", "--interval", "0.05")])
    first = await start_server(root)
    info = await started(first, "slow")
    await stop_server(first)
    bad = _fake_run(root, "broken-1", {"status": "running"})
    (bad / "state.json").write_bytes(b'{"runId": "broken-1", "sta')
    half = _fake_run(root, "broken-2", {"status": "running"})
    (half / "spec.json").write_bytes(b"\x00\xff garbage")
    second = await start_server(root)
    try:
        status = await second.call("arena/status", {})
        assert status["active"]["runId"] == info["runId"]
        assert status["active"]["status"] == "running"
        listed = {r["runId"]: r for r in status["runs"]}
        for broken, file in (("broken-1", "state.json"), ("broken-2", "spec.json")):
            assert listed[broken]["status"] == "lost", "a damaged run is listed, not hidden"
            assert listed[broken]["failure"]["kind"] == "damaged"
            assert listed[broken]["failure"]["evidence"].startswith(file)
    finally:
        await cleanup(second)


async def test_two_servers_agree_on_one_run(tmp_path: Path) -> None:
    root = make_workspace(
        tmp_path / "ws",
        [job("slow", "--steps", "100000", "--interval", "0.05"), job("quick", "--steps", "2")],
    )
    one = await start_server(root)
    two = await start_server(root, capabilities="neovim")
    try:
        info = await started(one, "slow")
        status = await two.call("arena/status", {})
        assert status["active"]["runId"] == info["runId"]
        error = await two.call_error("arena/start", {"id": "quick"})
        assert (error.code, error.data["reason"]) == (1003, "already-running")
        result = await two.call("arena/stop", {"confirm": True})
        assert result["status"] == "stopped"
        assert await one.call("arena/stop", {"confirm": True}) == {"status": "idle"}
        seen = await wait_status(one, info["runId"], "stopped")
        assert seen["stoppedBy"] == "file"
        texts = [line["text"] for line in await all_logs(one, info["runId"])]
        assert sum(t.startswith("stop requested") for t in texts) == 1
    finally:
        await cleanup(two)
        await cleanup(one)


async def test_kill_9_of_the_agent_takes_the_trainer_down(tmp_path: Path) -> None:
    """Documented choice: the trainer dies with its agent; the run is reported lost."""
    root = make_workspace(tmp_path / "ws", [job("slow", "--steps", "100000", "--interval", "0.05")])
    client = await start_server(root)
    try:
        info = await started(client, "slow")
        os.kill(info["agentPid"], signal.SIGKILL)
        final = await wait_status(client, info["runId"], "lost")
        assert "agent" in final["failure"]["evidence"]
        await wait_for(lambda: gone(info["pid"]), what="the trainer to go down")
        status = await client.call("arena/status", {})
        assert status["active"] is None
    finally:
        await cleanup(client)


async def test_stop_during_the_backoff_cancels_the_relaunch(tmp_path: Path) -> None:
    spec = job("crasher", "--steps", "50", "--crash-at", "1", kind="train",
               restart={"maxRestarts": 3, "backoffSeconds": 30})  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await started(client, "crasher")
        await wait_status(client, info["runId"], "restarting")
        result = await client.call("arena/stop", {"confirm": True})
        assert result["status"] == "stopped" and result["restarts"] == 1
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert sum(t.startswith("starting crasher") for t in texts) == 1
    finally:
        await cleanup(client)


async def test_resume_auto_false_and_start_step(tmp_path: Path) -> None:
    spec = job("resumable", "--steps", "100000", "--interval", "0.02", "--ckpt-every", "5", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        first = await started(client, "resumable")
        await wait_for(lambda: any('"checkpoint", "step": 5' in line["text"] for line in client.log_lines))
        stopped = await client.call("arena/stop", {})
        step = stopped["lastCheckpoint"]["step"]
        auto = await started(client, "resumable")
        assert (
            auto["argv"][-3:] == ["--resume", "--start-step", str(step)] and auto["runId"] != first["runId"]
        )
        await client.call("arena/stop", {"confirm": True, "kill": True})
        fresh = await started(client, "resumable", resume=False)
        assert "--resume" not in fresh["argv"]
        await client.call("arena/stop", {"confirm": True, "kill": True})
        refused = await client.call_error("arena/start", {"id": "resumable", "startStep": 3})
        assert (refused.code, refused.data["asked"]) == (1011, 3)
        chosen = await started(client, "resumable", startStep=3, confirm=True)
        assert chosen["argv"][-3:] == ["--resume", "--start-step", "3"]
        dry = await client.call("arena/start", {"id": "resumable", "dryRun": True, "resume": False})
        assert "--resume" not in dry["argv"] and dry["cwd"] == str(root)
    finally:
        await cleanup(client)


async def test_a_silent_trainer_is_reported_stalled_then_cleared(tmp_path: Path) -> None:
    spec = job("sleepy", "--steps", "3", "--interval", "2.5", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root, init_options={"watchdog": {"stallSeconds": 1}})
    try:
        info = await started(client, "sleepy")
        await wait_for(lambda: any(s["stalled"] for s in client.statuses), what="stalled")
        stalled_at = next(i for i, s in enumerate(client.statuses) if s["stalled"])
        await wait_for(lambda: any(not s["stalled"] for s in client.statuses[stalled_at:]), what="cleared")
        await wait_status(client, info["runId"], "succeeded")
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert any("the trainer is stalled" in t for t in texts) and "progress resumed" in texts
    finally:
        await cleanup(client)


async def test_a_truncated_log_is_detected_not_skipped(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "20", "--numbered")])
    client = await start_server(root)
    try:
        info = await started(client, "quick")
        await wait_status(client, info["runId"], "succeeded")
        page = await client.call("arena/logs", {"runId": info["runId"], "limit": 10})
        folder = run_dir(root, info["runId"])
        (folder / "output.log").write_bytes(b"")
        (folder / "output.idx").write_bytes(b"")
        after = await client.call("arena/logs", {"runId": info["runId"], "cursor": page["cursor"]})
        assert after["lines"] and "truncated" in after["lines"][0]["text"]
    finally:
        await cleanup(client)


async def test_the_state_folder_is_pruned(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "1")])
    for i in range(55):
        _fake_run(root, f"old-{i:03d}", {"status": "succeeded", "exitCode": 0})
    client = await start_server(root)
    try:
        info = await started(client, "quick")
        await wait_status(client, info["runId"], "succeeded")
        runs = list((root / ".aide" / "training" / "runs").iterdir())
        assert len(runs) <= 51
        assert run_dir(root, info["runId"]).exists()
    finally:
        await cleanup(client)


async def test_a_flood_keeps_the_server_small_and_responsive(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("flood", "--flood", "1000000")])
    client = await start_server(root)
    try:
        server = psutil.Process(client.server_process.pid)
        info = await started(client, "flood")
        peak = 0
        answered = 0
        run: dict[str, Any] = {}

        async def ended() -> bool:
            """The run's status, and the server's memory sampled at each answer while it floods."""
            nonlocal peak, answered
            status = await client.call("arena/status", {})
            answered += 1
            peak = max(peak, server.memory_info().rss)
            run.update(next(r for r in status["runs"] if r["runId"] == info["runId"]))
            return run["status"] in ("succeeded", "crashed", "lost")

        await poll_until(ended, f"the flood run {info['runId']} to end", FLOOD_DEADLINE_S)
        assert run["status"] == "succeeded", run
        assert peak < 150 * 1024 * 1024, f"server RSS peaked at {peak / 2**20:.0f} MB"
        assert answered >= 1
        data = Path(info["logPath"]).read_bytes()
        lines = [row for row in data.split(b"\n") if row.startswith(b"line ")]
        assert len(lines) == 1_000_000 and lines[-1] == b"line 999999"
        tail = await client.call("arena/logs", {"runId": info["runId"], "limit": 5})
        assert tail["lines"][0]["seq"] == 0

        def accounted() -> bool:
            shown = sum(1 for line in client.log_lines if line["text"].startswith("line "))
            summarised = sum(int(line["text"].split()[1]) for line in client.log_lines if line.get("summary"))
            return shown + summarised >= 1_000_000

        await wait_for(accounted, what="every line either sent or counted in a summary")
    finally:
        await cleanup(client)


@pytest.mark.parametrize("capabilities", ["visual-studio-code", "neovim"])
async def test_adopted_runs_notify_new_lines(tmp_path: Path, capabilities: str) -> None:
    # The run must outlive the second server's start (seconds on a loaded machine): it runs
    # until stopped, so that lines written after the adoption exist whatever the load.
    root = make_workspace(
        tmp_path / "ws", [job("ticker", "--steps", "100000", "--interval", "0.02", "--numbered")]
    )
    first = await start_server(root)
    info = await started(first, "ticker")
    await stop_server(first)
    second = await start_server(root, capabilities=capabilities)
    try:
        await wait_for(
            lambda: any(line["text"].startswith("numbered") for line in second.log_lines), what="live lines"
        )
        stopped = await second.call("arena/stop", {"runId": info["runId"], "confirm": True})
        assert stopped["status"] == "stopped"
    finally:
        await cleanup(second)
