"""A job with ``runOn`` runs on a real Ray head, through a real ``arena-ls`` over stdio.

Same buttons, logs, progress, stop and watchdog as a local run (contract 6.2).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from lsprotocol import types

from tests.cluster.conftest import RayHead
from tests.cluster.support import numbered, options, train_workspace, trainer_processes
from tests.helpers.lsp import all_logs, run_dir, start_server, stop_server, wait_for, wait_status

LONG = 180.0
"""Deadlines here are generous: a job on a loaded two-core machine with a Ray head beside it."""


async def test_a_job_runs_on_the_cluster_to_success_with_progress_and_metrics(
    tmp_path: Path, ray_head: RayHead
) -> None:
    # 5 s of training: the $/progress token is created by a round trip to the client before the first
    # report; a 0.4 s run on a loaded machine ended before it (no report with a percentage, ever)
    root = train_workspace(tmp_path, "tiny", "--steps 20 --interval 0.25 --ckpt-every 5 --numbered")
    client = await start_server(root, init_options=options(ray_head))
    try:
        info = await client.call("arena/start", {"id": "tiny"})
        cluster = info["cluster"]
        assert (
            cluster["name"] == "lab" and cluster["kind"] == "ray" and cluster["address"] == ray_head.address
        )
        assert cluster["submissionId"].startswith(f"arena-{info['runId']}-")
        assert info["pid"] is None, "the trainer's pid is the cluster's, not this machine's"
        final = await wait_status(client, info["runId"], "succeeded", "crashed", timeout=LONG)
        assert final["status"] == "succeeded", final
        assert final["exitCode"] == 0 and final["step"] == 20 and final["totalSteps"] == 20
        assert final["lastCheckpoint"]["step"] == 20
        lines = await all_logs(client, info["runId"])
        assert numbered(lines) == list(range(1, 21)), "every line of Ray's log, once, in order"
        metrics = await client.call("arena/metrics", {"runId": info["runId"]})
        assert [p["step"] for p in metrics["points"]][-1] == 20
        assert [c["step"] for c in metrics["checkpoints"]] == [5, 10, 15, 20]
        await wait_for(
            lambda: any(
                isinstance(v, types.WorkDoneProgressReport) and (v.percentage or 0) > 0
                for reports in client.progress_reports.values()
                for v in reports
            ),
            what="a $/progress report with a percentage",
        )
        assert any(line["runId"] == info["runId"] for line in client.log_batches), "arena/log notifications"
        token = ray_head.token
        assert all(token not in line["text"] for line in lines), "the token never reaches the log"
    finally:
        await stop_server(client)


async def test_stop_with_a_checkpoint_then_resume_on_the_cluster(tmp_path: Path, ray_head: RayHead) -> None:
    root = train_workspace(tmp_path, "long", "--steps 100000 --interval 0.05 --ckpt-every 5")
    client = await start_server(root, init_options=options(ray_head))
    try:
        info = await client.call("arena/start", {"id": "long"})
        run_id = info["runId"]
        await wait_status(client, run_id, "running", timeout=LONG)
        await wait_for(
            lambda: any('"checkpoint"' in line["text"] for line in client.log_lines if line),
            LONG,
            "a checkpoint",
        )
        result = await client.call("arena/stop", {"id": "long"})
        assert result["status"] == "stopped" and result["stoppedBy"] == "signal", result
        step = result["lastCheckpoint"]["step"]
        texts = [line["text"] for line in await all_logs(client, run_id)]
        assert "stopping cooperatively" in texts, "SIGTERM reached the trainer (exec: no shell in between)"

        again = await client.call("arena/start", {"id": "long"})
        assert again["runId"] != run_id and again["resumedFromStep"] == step
        assert again["argv"][-3:] == ["--resume", "--start-step", str(step)]
        await wait_status(client, again["runId"], "running", timeout=LONG)
        await wait_for(
            lambda: any(
                line["text"].startswith("argv:") and "--start-step" in line["text"]
                for batch in client.log_batches
                if batch["runId"] == again["runId"]
                for line in batch["lines"]
            ),
            LONG,
            "the resumed trainer's argv",
        )
        stopped = await client.call("arena/stop", {"id": "long", "confirm": True})
        assert stopped["status"] == "stopped"
    finally:
        await stop_server(client)


async def test_kill_9_of_the_trainer_on_the_cluster_resubmits_from_its_checkpoint(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(
        tmp_path,
        "victim",
        "--steps 60 --interval 0.1 --ckpt-every 5",
        restart={"maxRestarts": 2, "backoffSeconds": 0.2},
    )
    client = await start_server(root, init_options=options(ray_head))
    try:
        info = await client.call("arena/start", {"id": "victim"})
        run_id = info["runId"]
        first = info["cluster"]["submissionId"]
        await wait_for(
            lambda: any('"checkpoint"' in line["text"] for line in client.log_lines), LONG, "a checkpoint"
        )
        victims = await wait_for(lambda: trainer_processes(run_id), LONG, "the trainer on the cluster")
        os.kill(victims[0].pid, signal.SIGKILL)
        final = await wait_status(client, run_id, "succeeded", "crashed", timeout=LONG)
        assert final["status"] == "succeeded" and final["restarts"] == 1, final
        assert final["cluster"]["submissionId"] != first, "a new submission id for the relaunch"
        texts = [line["text"] for line in await all_logs(client, run_id)]
        # As a local run's (contract 4.1: killed by a signal, its code is the negative signal number).
        crash = texts.index("TRAINING_CRASHED: victim code -9")
        assert texts[crash - 1] == "job was killed by SIGKILL", texts
        assert texts[crash + 1].startswith("failure: killed: "), texts
        assert texts.count("TRAINING_CRASHED: victim code -9") == 1
        relaunch = next(t for t in texts if t.startswith("starting victim") and "--resume" in t)
        assert int(relaunch.rsplit("--start-step ", 1)[1]) >= 5
    finally:
        await stop_server(client)


async def test_a_crash_loop_on_the_cluster_is_not_resubmitted_again(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(
        tmp_path,
        "loop",
        "--steps 30 --interval 0.01 --ckpt-every 5 --crash-at 7",
        restart={"maxRestarts": 3, "backoffSeconds": 0.2},
    )
    client = await start_server(root, init_options=options(ray_head))
    try:
        info = await client.call("arena/start", {"id": "loop"})
        final = await wait_status(client, info["runId"], "crashed", timeout=LONG)
        assert final["failure"]["kind"] == "crash-loop", final
        assert final["restarts"] == 1 and final["lastCheckpoint"]["step"] == 5
        state = (run_dir(root, info["runId"]) / "state.json").read_text()
        assert f"arena-{info['runId']}-2" in state, "the relaunch was a second submission"
    finally:
        await stop_server(client)


async def test_a_new_server_re_adopts_a_cluster_run_with_every_line_once(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(tmp_path, "steady", "--steps 80 --interval 0.05 --numbered --ckpt-every 10")
    client = await start_server(root, init_options=options(ray_head))
    info = await client.call("arena/start", {"id": "steady"})
    run_id = info["runId"]
    await wait_for(lambda: any(line["text"] == "numbered 5" for line in client.log_lines), LONG, "line 5")
    running = await wait_status(client, run_id, "running")
    client.server_process.kill()  # the laptop closes: the server and the run's agent die
    await client.server_process.wait()
    await client.stop()
    os.kill(running["agentPid"], signal.SIGKILL)
    submission = ray_head.request("GET", f"/api/jobs/{running['cluster']['submissionId']}")
    assert submission["status"] in ("RUNNING", "SUCCEEDED"), "the job goes on without its agent"

    again = await start_server(root, init_options=options(ray_head))
    try:
        final = await wait_status(again, run_id, "succeeded", "crashed", "lost", timeout=LONG)
        assert final["status"] == "succeeded", final
        assert final["agentPid"] != running["agentPid"], "a new agent"
        assert numbered(await all_logs(again, run_id)) == list(range(1, 81)), "no line lost or repeated"
    finally:
        await stop_server(again)
