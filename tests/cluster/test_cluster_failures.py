"""The failure modes of docs/clusters.md, each made to happen for real on the session's Ray head.

The head going away (a proxy the test switches off), an agent that died between recording
a submission and sending it, a runtime environment Ray cannot set up, a job folder over
Ray's package limit, and a stop that needs Ray's SIGKILL or a confirmation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from arena_ls.cluster.submission import PACKAGE_LIMIT_VARIABLE, build_package
from tests.cluster.conftest import RayHead
from tests.cluster.support import (
    HeadProxy,
    head_job,
    numbered,
    options,
    put_package,
    train_workspace,
)
from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    poll_until,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

LONG = 180.0
"""Deadlines are generous: a job on a loaded two-core machine with a Ray head beside it."""
WARNING = "warning: cluster 'lab' is not reachable"
AGAIN = "cluster 'lab' answers again"


def texts(client: ArenaClient, run_id: str | None = None) -> list[str]:
    """The text of every ``arena/log`` line the client got (of ``run_id``, when given)."""
    return [
        line["text"]
        for batch in client.log_batches
        if run_id is None or batch["runId"] == run_id
        for line in batch["lines"]
    ]


def ray_numbered(head: RayHead, submission_id: str) -> int:
    """The last ``numbered N`` line in Ray's own log of the submission (0 before the first)."""
    logs = head.request("GET", f"/api/jobs/{submission_id}/logs")["logs"]
    found = [int(t.split()[1]) for t in logs.splitlines() if t.startswith("numbered ")]
    return max(found, default=0)


def state_of(root: Path, run_id: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((run_dir(root, run_id) / "state.json").read_text())
    return document


async def test_the_head_going_away_while_a_job_runs_is_retried_and_every_line_arrives_once(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(tmp_path, "steady", "--steps 60 --interval 0.1 --numbered --ckpt-every 10")
    with HeadProxy(ray_head) as proxy:
        client = await start_server(root, init_options=options(ray_head, address=proxy.address))
        try:
            info = await client.call("arena/start", {"id": "steady"})
            run_id, sid = info["runId"], info["cluster"]["submissionId"]
            await wait_for(lambda: "numbered 5" in texts(client), LONG, "line 5")

            proxy.mode = "reset"  # the head goes away: every request of the agent fails
            await wait_for(
                lambda: any(t.startswith(WARNING) for t in texts(client, run_id)), LONG, "the warning"
            )
            copied = max(numbered([{"text": t} for t in texts(client, run_id)]))
            refused = proxy.refused
            target = min(copied + 5, 60)

            async def went_on() -> bool:
                return ray_numbered(ray_head, sid) >= target

            # Ray's log of the job, read every 0.25 s (each read is a request to the head).
            await poll_until(
                went_on, f"the job going on past line {copied} without its agent", LONG, pause=0.25
            )
            await wait_for(lambda: proxy.refused >= refused + 2, LONG, "two more tries of the agent")
            warned = sum(t.startswith(WARNING) for t in texts(client, run_id))
            assert warned == 1, "one warning, not one a try"
            assert AGAIN not in texts(client, run_id)

            proxy.mode = "pass"  # the head answers again
            final = await wait_status(client, run_id, "succeeded", "crashed", "lost", timeout=LONG)
            assert final["status"] == "succeeded" and final["exitCode"] == 0, final
            assert final["restarts"] == 0 and final["cluster"]["submissionId"] == sid, "never resubmitted"
            logged = await all_logs(client, run_id)
            lines = [line["text"] for line in logged]
            warnings = [t for t in lines if t.startswith(WARNING)]
            assert len(warnings) == 1 and warnings[0].endswith("; the job keeps running there, retrying")
            assert lines.count(AGAIN) == 1
            warned_at, again_at = lines.index(warnings[0]), lines.index(AGAIN)
            assert warned_at < again_at
            between = [line for line in logged[warned_at:again_at] if line["stream"] != "arena"]
            assert not between, f"the lines caught up come after {AGAIN!r}: {between[:3]}"
            assert copied < 60 and any(line["stream"] != "arena" for line in logged[again_at:]), (
                "the job's lines from the outage, caught up"
            )
            assert numbered([{"text": t} for t in lines]) == list(range(1, 61)), "every line once, in order"
            assert all(proxy.address.split("//")[1] not in t for t in lines), "no address in the log"
        finally:
            await stop_server(client)


async def test_a_submission_recorded_but_never_sent_is_sent_when_a_new_server_adopts_the_run(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(tmp_path, "late", "--steps 20 --interval 0.05 --numbered --ckpt-every 5")
    with HeadProxy(ray_head) as proxy:
        # The head hangs on the package and the submission: the agent has recorded the id
        # (and said so in the log) and is blocked before Ray hears of it. Then the laptop closes.
        proxy.hold_prefixes = ("GET /api/packages/", "PUT /api/packages/", "POST /api/jobs/")
        client = await start_server(root, init_options=options(ray_head, address=proxy.address))
        start = asyncio.ensure_future(client.call("arena/start", {"id": "late"}))
        runs = root / ".aide" / "training" / "runs"
        await wait_for(lambda: proxy.held, LONG, "the agent's request to send the job")
        (folder,) = runs.iterdir()
        run_id = folder.name
        recorded = state_of(root, run_id)
        client.server_process.kill()
        await client.server_process.wait()
        os.kill(recorded["agentPid"], signal.SIGKILL)
        with contextlib.suppress(Exception):
            await start  # the server died under it
        await client.stop()
        sid = recorded["cluster"]["submissionId"]
        assert sid == f"arena-{run_id}-1" and recorded["cluster"]["accepted"] is None, recorded
        assert head_job(ray_head, sid) is None, "Ray never heard of the recorded submission"

        proxy.hold_prefixes = ()
        again = await start_server(root, init_options=options(ray_head, address=proxy.address))
        try:
            final = await wait_status(again, run_id, "succeeded", "crashed", "lost", timeout=LONG)
            assert final["status"] == "succeeded", final
            assert final["agentPid"] != recorded["agentPid"], "a new agent"
            assert final["cluster"]["submissionId"] == sid and final["restarts"] == 0
            assert state_of(root, run_id)["cluster"]["submissions"] == [sid], "sent once, under its own id"
            job = head_job(ray_head, sid)
            assert job is not None and job["status"] == "SUCCEEDED", job
            lines = await all_logs(again, run_id)
            assert f"cluster 'lab' never received {sid}: submitting it now" in [x["text"] for x in lines]
            assert numbered(lines) == list(range(1, 21)), "every line once"
        finally:
            await stop_server(again)


async def test_a_submission_whose_answer_is_lost_is_found_on_the_cluster_and_followed(
    tmp_path: Path, ray_head: RayHead
) -> None:
    # Seen on a loaded machine: Ray took longer than the request's timeout to answer a
    # submission it then ran; the agent took it for refused and the run ended `crashed`.
    root = train_workspace(tmp_path, "unanswered", "--steps 20 --interval 0.05 --numbered")
    with HeadProxy(ray_head) as proxy:
        proxy.lose_prefixes = ("POST /api/jobs/",)  # the head gets the submission; its answer is lost
        client = await start_server(root, init_options=options(ray_head, address=proxy.address))
        try:
            info = await client.call("arena/start", {"id": "unanswered"})
            run_id, sid = info["runId"], info["cluster"]["submissionId"]
            final = await wait_status(client, run_id, "succeeded", "crashed", "lost", timeout=LONG)
            assert proxy.lost == 1, "one submission, whose answer was lost"
            assert final["status"] == "succeeded" and final["restarts"] == 0, final
            assert state_of(root, run_id)["cluster"]["submissions"] == [sid]
            job = head_job(ray_head, sid)
            assert job is not None and job["status"] == "SUCCEEDED", job
            lines = await all_logs(client, run_id)
            texts_ = [line["text"] for line in lines]
            assert sum(t.startswith(f"warning: no answer to the submission of {sid}") for t in texts_) == 1
            assert numbered(lines) == list(range(1, 21)), "every line once"
        finally:
            await stop_server(client)


async def test_a_runtime_environment_ray_cannot_set_up_crashes_the_run_without_a_resubmission(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(
        tmp_path,
        "broken",
        "--steps 20 --interval 0.05 --ckpt-every 5",
        restart={"maxRestarts": 2, "backoffSeconds": 0.2},
    )
    # The job's package is already on the head, as far as arena-ls can tell (the same tree makes
    # the same URI), but what the head holds under that URI is not a zip Ray can unpack.
    uri, _ = build_package(root)
    put_package(ray_head, uri, b"this is not a zip archive\n" * 64)
    client = await start_server(root, init_options=options(ray_head))
    try:
        info = await client.call("arena/start", {"id": "broken"})
        run_id, sid = info["runId"], info["cluster"]["submissionId"]
        final = await wait_status(client, run_id, "crashed", "succeeded", "lost", timeout=LONG)
        state = state_of(root, run_id)
        assert state["cluster"]["package"] == uri, "the run used the broken package"
        assert final["status"] == "crashed", final
        assert final["restarts"] == 0 and state["cluster"]["submissions"] == [sid], "not resubmitted"
        job = head_job(ray_head, sid)
        assert job is not None and job["status"] == "FAILED" and job.get("driver_exit_code") is None, job
        ray_first_line = str(job["message"]).strip().splitlines()[0]
        assert final["failure"]["kind"] == "error", final
        cut = ray_first_line[:300] + ("…" if len(ray_first_line) > 300 else "")
        assert final["failure"]["evidence"] == cut, (final, job)
        lines = [line["text"] for line in await all_logs(client, run_id)]
        assert not any(t.startswith("restarting") for t in lines), lines
    finally:
        await stop_server(client)


async def test_a_job_folder_over_rays_package_limit_crashes_the_run_naming_the_file(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(tmp_path, "heavy", "--steps 5 --interval 0.05")
    data = root / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(os.urandom(600 * 1024))
    (data / "b.bin").write_bytes(os.urandom(600 * 1024))  # a.bin + b.bin cross 1 MiB here
    client = await start_server(
        root,
        init_options=options(ray_head),
        env={PACKAGE_LIMIT_VARIABLE: str(1024 * 1024)},  # Ray's own variable for its limit
    )
    try:
        info = await client.call("arena/start", {"id": "heavy"})
        run_id, sid = info["runId"], info["cluster"]["submissionId"]
        final = await wait_status(client, run_id, "crashed", "succeeded", "lost", timeout=LONG)
        assert final["status"] == "crashed" and final["restarts"] == 0, final
        evidence = final["failure"]["evidence"]
        assert "over 1 MiB" in evidence and evidence.endswith("at data/b.bin"), evidence
        assert head_job(ray_head, sid) is None, "nothing was sent"
    finally:
        await stop_server(client)


async def test_a_stop_on_the_cluster_asks_to_confirm_without_a_checkpoint_and_ends_by_kill_when_ignored(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(
        tmp_path,
        "stubborn",
        "--steps 100000 --interval 0.05 --ignore-stop",
        stop={"method": "signal", "graceSeconds": 1},
    )
    client = await start_server(root, init_options=options(ray_head))
    try:
        info = await client.call("arena/start", {"id": "stubborn"})
        run_id, sid = info["runId"], info["cluster"]["submissionId"]
        await wait_status(client, run_id, "running", timeout=LONG)
        # Ray says RUNNING while it still sets up the runtime environment: wait for the trainer
        # itself, which ignores SIGTERM from before its first line.
        await wait_for(lambda: any(t.startswith("argv:") for t in texts(client, run_id)), LONG, "the trainer")

        refused = await client.call_error("arena/stop", {"id": "stubborn"})
        assert refused.code == 1007, refused
        data = refused.data or {}
        assert data["reason"] == "no-checkpoint" and isinstance(data["runtimeSeconds"], (int, float)), data
        job = head_job(ray_head, sid)
        assert job is not None and job["status"] == "RUNNING", "the refused stop left the job running"
        assert not (run_dir(root, run_id) / "stop.json").exists()

        stopped = await client.call("arena/stop", {"id": "stubborn", "confirm": True})
        assert stopped["status"] == "stopped" and stopped["stoppedBy"] == "kill", stopped
        job = head_job(ray_head, sid)
        assert job is not None and job["status"] == "STOPPED", job
        lines = [line["text"] for line in await all_logs(client, run_id)]
        assert "stopped (by kill)" in lines
        assert f"asked cluster 'lab' to stop {sid}: SIGTERM now, SIGKILL after 1s" in lines
    finally:
        await stop_server(client)
