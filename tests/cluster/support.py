"""Workspaces whose jobs run on the session's Ray head (``runOn: "lab"``)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import psutil

from tests.cluster.conftest import RayHead
from tests.helpers.lsp import REPO, RESUME, job, make_workspace

CLUSTER = "lab"
SIGNAL_STOP = {"method": "signal", "graceSeconds": 10}


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
