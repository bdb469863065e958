"""Workspaces whose jobs run on the session's Ray head (``runOn: "lab"``)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import psutil

from tests.cluster.conftest import RayHead
from tests.helpers.lsp import REPO, RESUME, job, make_workspace, start_server, stop_server

CLUSTER = "lab"
SIGNAL_STOP = {"method": "signal", "graceSeconds": 10}
PREFLIGHT_FAILED = 1005
LOCAL_ONLY_CHECKS = {"power", "ram", "gpu-contention", "disk"}
"""docs/preflight.md: the checks of this machine that the ``cluster`` check replaces."""
TASK_CHECKS = ("cluster", "state-dir")
TRAIN_CHECKS = ("cluster", "state-dir", "gates")
"""The pre-flight of a cluster job, in order (the ``cluster`` check first)."""


def cluster_job(job_id: str, *args: str, **extra: Any) -> dict[str, Any]:
    """A fake-trainer job that runs on the cluster and stops by signal (AR111 otherwise)."""
    extra.setdefault("stop", SIGNAL_STOP)
    return job(job_id, *args, runOn=CLUSTER, **extra)


def cluster_workspace(root: Path, jobs: list[dict[str, Any]]) -> Path:
    """A workspace whose manifest declares the cluster without its address (settings give it)."""
    make_workspace(root, jobs)
    manifest = root / "training" / "manifest.json"
    document = json.loads(manifest.read_text())
    document["clusters"] = {CLUSTER: {"kind": "ray"}}
    manifest.write_text(json.dumps(document, indent=2))
    return root


REFERENCE_CKPT_EVERY = 20
REFERENCE_LOG_EVERY = 5


def reference_workspace(root: Path, job_id: str, steps: int) -> Path:
    """A workspace whose one job is the reference trainer (``training/train.py``) on the cluster,
    small and quick: batches of 4, progress every 5 steps, a checkpoint every 20 into
    ``ROOT/checkpoints/JOB`` (an absolute path: storage the cluster's node, this machine, shares
    with us; checkpoints are never shipped in the ``working_dir``)."""
    training = root / "training"
    training.mkdir(parents=True)
    shutil.copy(REPO / "training" / "train.py", training / "train.py")
    shutil.copytree(REPO / "training" / "data", training / "data")
    args = [
        "training/train.py", "--steps", str(steps), "--ckpt-every", str(REFERENCE_CKPT_EVERY),
        "--log-every", str(REFERENCE_LOG_EVERY), "--batch-size", "4", "--eval-every", "1000",
        "--sample-chars", "0", "--ckpt-dir", str(root / "checkpoints" / job_id),
    ]  # fmt: skip
    reference = {
        "id": job_id, "kind": "train", "command": "{python}", "args": args, "script": "training/train.py",
        "env": {"OMP_NUM_THREADS": "1"}, "status": "ready", "resume": RESUME, "stop": SIGNAL_STOP,
        "runOn": CLUSTER,
    }  # fmt: skip
    manifest = {"version": 1, "clusters": {CLUSTER: {"kind": "ray"}}, "jobs": [reference]}
    (training / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


def options(head: RayHead, **override: Any) -> dict[str, Any]:
    """``initializationOptions`` naming the head's address, token file and interpreter."""
    settings = {"address": head.address, "tokenFile": str(head.token_file), "python": sys.executable}
    settings.update(override)
    return {"clusters": {CLUSTER: settings}}


def trainer_processes(run_id: str) -> list[psutil.Process]:
    """The run's trainer on the (local) cluster: found by the ``ARENA_RUN_ID`` Ray gave it."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if not any("fake_trainer.py" in part for part in process.info["cmdline"] or []):
                continue
            if process.environ().get("ARENA_RUN_ID") == run_id:
                found.append(process)
        except psutil.Error:
            continue
    return found


async def refusal(
    root: Path, init_options: dict[str, Any], job_id: str = "tiny", checks: tuple[str, ...] = TASK_CHECKS
) -> dict[str, Any]:
    """Start ``job_id``; return the failed ``cluster`` check of the 1005 refusal (and that no run exists).

    The refusal lists ``checks`` in this order: the ``cluster`` check first, none of this machine's
    ``power``, ``ram``, ``gpu-contention`` and ``disk`` (docs/preflight.md)."""
    client = await start_server(root, init_options=init_options)
    try:
        error = await client.call_error("arena/start", {"id": job_id})
        assert error.code == PREFLIGHT_FAILED, error
        data: dict[str, Any] = error.data or {}
        assert data["reason"] == "preflight-failed", data
        names = [check["name"] for check in data["checks"]]
        assert not LOCAL_ONLY_CHECKS & set(names), names
        assert names == list(checks), names
        status = await client.call("arena/status", {})
        assert status["runs"] == [], "nothing was started"
        check: dict[str, Any] = data["checks"][0]
        assert check["ok"] is False
        assert "cluster" in str(error) or "pre-flight" in str(error)
        return check
    finally:
        await stop_server(client)
