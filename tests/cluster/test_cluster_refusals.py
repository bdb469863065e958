"""A cluster job that cannot run is refused before anything is submitted, naming the ``cluster`` check.

Also the reference trainer on the cluster, and what ``dryRun`` shows for a cluster job."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import RayHead, free_port
from tests.cluster.support import (
    CLUSTER,
    SIGNAL_STOP,
    TASK_CHECKS,
    cluster_job,
    cluster_workspace,
    options,
    refusal,
)
from tests.helpers.lsp import REPO, RESUME, all_logs, start_server, stop_server, wait_status


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return cluster_workspace(
        tmp_path / "ws",
        [cluster_job("tiny", "--steps", "3"),
         cluster_job("greedy", "--steps", "3", resources={"gpus": 4, "cpus": 1})],
    )  # fmt: skip


async def test_a_cluster_that_is_down_is_refused(workspace: Path, ray_head: RayHead) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    check = await refusal(workspace, options(ray_head, address=down))
    assert "not reachable" in check["message"] and down not in check["message"]


async def test_a_wrong_token_is_refused(workspace: Path, ray_head: RayHead, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token\n")
    check = await refusal(workspace, options(ray_head, tokenFile=str(wrong)))
    assert "token was refused" in check["message"] and "tokenFile" in check["message"]
    assert "not-the-token" not in check["message"] and ray_head.address not in check["message"]


async def test_no_token_at_all_is_refused(workspace: Path, ray_head: RayHead) -> None:
    settings = options(ray_head)
    del settings["clusters"][CLUSTER]["tokenFile"]
    check = await refusal(workspace, settings)
    assert "no token was sent" in check["message"]


async def test_resources_the_cluster_does_not_have_are_refused(workspace: Path, ray_head: RayHead) -> None:
    check = await refusal(workspace, options(ray_head), job_id="greedy")
    assert "has no node with 4 GPUs" in check["message"]


async def test_a_dry_run_shows_the_cluster_check_and_the_cluster_interpreter(
    workspace: Path, ray_head: RayHead
) -> None:
    client = await start_server(workspace, init_options=options(ray_head, python=["/opt/cluster/python"]))
    try:
        result = await client.call("arena/start", {"id": "tiny", "dryRun": True})
        assert result["argv"][0] == "/opt/cluster/python", "{python} is the cluster's interpreter"
        checks = {check["name"]: check for check in result["preflight"]}
        assert checks["cluster"]["ok"] is True and "1 node, 2 CPUs, 0 GPUs" in checks["cluster"]["message"]
        assert list(checks) == list(TASK_CHECKS), "the cluster check first, none of this machine's"
    finally:
        await stop_server(client)


async def test_the_reference_trainer_runs_on_the_cluster(tmp_path: Path, ray_head: RayHead) -> None:
    pytest.importorskip("torch")
    root = tmp_path / "ws"
    (root / "training").mkdir(parents=True)
    shutil.copy(REPO / "training" / "train.py", root / "training" / "train.py")
    shutil.copytree(REPO / "training" / "data", root / "training" / "data")
    ckpt = root / "checkpoints" / "ref"  # an absolute path: storage the cluster's node shares with us
    job = {
        "id": "ref", "kind": "train", "command": "{python}", "status": "ready", "script": "training/train.py",
        "args": ["training/train.py", "--steps", "30", "--ckpt-every", "10", "--log-every", "1",
                 "--batch-size", "4", "--eval-every", "1000", "--seed", "7", "--ckpt-dir", str(ckpt)],
        "env": {"OMP_NUM_THREADS": "1"}, "resume": RESUME, "stop": SIGNAL_STOP, "runOn": CLUSTER,
    }  # fmt: skip
    manifest = {"version": 1, "clusters": {CLUSTER: {"kind": "ray"}}, "jobs": [job]}
    (root / "training" / "manifest.json").write_text(json.dumps(manifest))
    client = await start_server(root, init_options=options(ray_head))
    try:
        info = await client.call("arena/start", {"id": "ref"})
        final = await wait_status(client, info["runId"], "succeeded", "crashed", timeout=300)
        assert final["status"] == "succeeded", final
        assert final["step"] == 30 and final["lastCheckpoint"]["step"] == 30
        metrics = await client.call("arena/metrics", {"runId": info["runId"]})
        assert len(metrics["points"]) >= 10 and all(p["loss"] > 0 for p in metrics["points"])
        assert (ckpt / "ckpt_latest.pt").exists(), "the checkpoint is on the shared storage"
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert any(t.startswith("starting ref: " + sys.executable) for t in texts)
    finally:
        await stop_server(client)


def test_arena_start_runs_a_cluster_job_from_the_terminal(tmp_path: Path, ray_head: RayHead) -> None:
    """``arena start --follow``: the same follow as locally, saying ``tiny @ lab``; settings from
    ``$ARENA_SETTINGS`` (the terminal has no editor settings)."""
    import os
    import subprocess

    root = cluster_workspace(tmp_path / "ws", [cluster_job("tiny", "--steps", "5", "--numbered")])
    settings = tmp_path / "arena-settings.json"
    settings.write_text(json.dumps(options(ray_head)))
    env = {**os.environ, "ARENA_NO_COLOR": "1", "ARENA_SETTINGS": str(settings)}
    done = subprocess.run(
        [sys.executable, "-m", "arena_ls.client.cli", "start", "tiny", "--follow", "--root", str(root)],
        capture_output=True, text=True, env=env, cwd=root, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "of job tiny @ lab (submission arena-tiny-" in done.stdout, done.stdout
    assert "numbered 5" in done.stdout and "succeeded" in done.stdout, done.stdout
