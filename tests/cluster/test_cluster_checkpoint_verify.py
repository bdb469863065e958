"""A cluster run resumes only from a checkpoint verified on the cluster (contract 8.2), on a real Ray head.

The trainer (``torn_save_trainer.py``: slow saves straight to their final path, announced with
``bytes`` and ``sha256``) runs on the head, in the folder Ray extracted the run's package to;
the test kills it there half-way through a save. Before the relaunch the agent submits its
checkpoint reader (``cluster/ckpt_reader.py``) to the same cluster, in the same package, and
judges the readings here. On main before issue 36c a cluster run's checkpoints were not looked
at: the relaunch went onto the torn file, the trainer refused it and the run ended
``resume-refused``.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path
from typing import Any

import psutil

from tests.cluster.conftest import RayHead
from tests.cluster.support import CLUSTER, SIGNAL_STOP, cluster_workspace, options
from tests.helpers.lsp import RESUME, ArenaClient, all_logs, start_server, stop_server, wait_for, wait_status

LONG = 180.0
"""Deadlines here are generous: a job on a loaded two-core machine with a Ray head beside it."""
TRAINERS = Path(__file__).resolve().parents[1] / "fixtures" / "trainers"
SCRIPT = "torn_save_trainer.py"


def torn_workspace(tmp_path: Path, *args: str, **extra: Any) -> Path:
    """A workspace whose ``lm`` job runs the torn-save trainer on the cluster with ``args``; its
    package is its own (a file naming the test), so no other test's files share its folder there."""
    spec = {
        "id": "lm", "kind": "train", "command": "{python}", "args": [SCRIPT, *args], "script": SCRIPT,
        "status": "ready", "resume": RESUME, "stop": SIGNAL_STOP, "runOn": CLUSTER,
        "restart": {"maxRestarts": 3, "backoffSeconds": 0}, **extra,
    }  # fmt: skip
    root = cluster_workspace(tmp_path / "ws", [spec])
    shutil.copy(TRAINERS / SCRIPT, root / SCRIPT)
    (root / "package-of.txt").write_text(f"{tmp_path.name}\n")
    return root


def trainer_on_the_cluster(run_id: str) -> psutil.Process | None:
    """The run's trainer on the (local) head: found by the ``ARENA_RUN_ID`` Ray gave it."""
    for process in psutil.process_iter(["cmdline"]):
        try:
            mine = any(SCRIPT in part for part in process.info["cmdline"] or [])
            if mine and process.environ().get("ARENA_RUN_ID") == run_id:
                return process
        except psutil.Error:
            continue
    return None


async def kill_in_its_folder(run_id: str, marker: str) -> Path:
    """SIGKILL the run's trainer once it created ``marker`` in its folder on the cluster (it
    waits there, half-way through a save); that folder (Ray's extraction of the package)."""
    trainer = await wait_for(lambda: trainer_on_the_cluster(run_id), LONG, "the trainer on the cluster")
    folder = Path(trainer.cwd())
    await wait_for(lambda: (folder / marker).exists(), LONG, marker)
    os.kill(trainer.pid, signal.SIGKILL)
    return folder


async def arena_lines(client: ArenaClient, run_id: str) -> list[str]:
    return [line["text"] for line in await all_logs(client, run_id) if line["stream"] == "arena"]


async def test_a_torn_newest_checkpoint_on_the_cluster_is_skipped_for_the_previous_whole_one(
    tmp_path: Path, ray_head: RayHead
) -> None:
    """ckpt-N files, a save announced as it starts, killed half-written at step 40 on the cluster:
    the relaunch skips step 40 (its size is not the announced one) for step 20, verified by sha256.
    The job asks for a CPU, so the reader is pinned to the node the trainer ran on."""
    root = torn_workspace(
        tmp_path, "--announce", "before", "--hang-in-save", "40", "--steps", "60", resources={"cpus": 1}
    )
    client = await start_server(root, init_options=options(ray_head))
    try:
        run = await client.call("arena/start", {"id": "lm"})
        await kill_in_its_folder(run["runId"], "writing-40")
        done = await wait_status(client, run["runId"], "succeeded", "crashed", timeout=LONG)
        assert done["status"] == "succeeded", done
        resumed = done["resumedFrom"]
        assert (resumed["step"], resumed["path"], resumed["verified"]) == (20, "ckpt-20.json", "sha256")
        assert [(s["step"], s["path"]) for s in resumed["skipped"]] == [(40, "ckpt-40.json")]
        assert "announced: torn or replaced" in resumed["skipped"][0]["why"], resumed
        lines = await arena_lines(client, run["runId"])
        assert f"verifying the checkpoints on cluster {CLUSTER!r} before resuming" in lines, lines
        assert any(
            line.startswith("resuming from step 20 (ckpt-20.json), verified by sha256; skipped step 40")
            for line in lines
        ), lines
        logs = [line["text"] for line in await all_logs(client, run["runId"])]
        assert "resumed from ckpt-20.json at step 20" in logs, "the trainer loaded the whole one"
        readers = [j for j in ray_head.request("GET", "/api/jobs/") if str(j.get("submission_id")).startswith(
            f"arena-{run['runId']}-verify-")]  # fmt: skip
        assert [j["status"] for j in readers] == ["SUCCEEDED"], readers
        assert readers[0]["driver_node_id"], "it ran on a node Ray names"
    finally:
        await stop_server(client)


async def test_a_cluster_run_whose_every_checkpoint_is_torn_ends_resume_unknown_never_resuming(
    tmp_path: Path, ray_head: RayHead
) -> None:
    """nanoGPT's way on the cluster: one ckpt.json overwritten in place, killed half-way through
    step 40's save (step 20's announced size no longer matches): no relaunch, ``crashed``
    ``resume-unknown`` naming what failed, and the file left as the kill left it."""
    root = torn_workspace(tmp_path, "--layout", "one", "--hang-in-save", "40", "--steps", "60")
    client = await start_server(root, init_options=options(ray_head))
    try:
        run = await client.call("arena/start", {"id": "lm"})
        folder = await kill_in_its_folder(run["runId"], "writing-40")
        done = await wait_status(client, run["runId"], "succeeded", "crashed", timeout=LONG)
        assert done["status"] == "crashed", done
        assert done["failure"]["kind"] == "resume-unknown", done
        evidence = done["failure"]["evidence"]
        assert "step 20 (ckpt.json)" in evidence and "torn or replaced" in evidence, evidence
        assert done["resumedFrom"] is None
        lines = await arena_lines(client, run["runId"])
        assert not any(line.startswith("restarting") for line in lines), lines
        assert sum(line.startswith("starting ") for line in lines) == 1, "no second trainer was started"
        submissions = [str(j.get("submission_id")) for j in ray_head.request("GET", "/api/jobs/")]
        trainers = [s for s in submissions if s.startswith(f"arena-{run['runId']}-") and "-verify-" not in s]
        assert trainers == [done["cluster"]["submissionId"]], "never resubmitted"
        half = (folder / "ckpt.json").read_bytes()
        assert b'"step": 40' in half and not half.endswith(b"}"), "the torn save, untouched"
    finally:
        await stop_server(client)
