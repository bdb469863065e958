"""Workspaces whose jobs run on the session's Ray head (``runOn: "lab"``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import psutil

from tests.cluster.conftest import RayHead
from tests.helpers.lsp import job, make_workspace

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
