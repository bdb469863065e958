"""The seed's own setup through a real arena-ls (contract 7.3): its interpreter flags, its trainer
folder (``roots``), its stages, ``approval: always`` and ``gates.severity``."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.helpers.lsp import (
    REPO,
    all_logs,
    judged_status,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)
from tests.lsp.test_gates_in_the_editor import codes, open_doc

SEED_TRAINER = REPO / "tests" / "fixtures" / "trainers" / "seed_trainer.py"
WELL_WRITTEN = REPO / "tests" / "gates" / "fixtures" / "clean" / "well_written.py"
SEED_RESUME = {"args": ["--resume", "--start-step", "<step>"]}


def write_manifest(root: Path, document: dict[str, Any]) -> None:
    (root / "training").mkdir(parents=True, exist_ok=True)
    (root / "training" / "manifest.json").write_text(json.dumps({"version": 1, **document}, indent=2))


def seed_job(script: str, release: Path, **extra: Any) -> dict[str, Any]:
    """The SOP's entry as a train job: the interpreter comes from the ``python`` setting."""
    return {
        "id": "pretrain",
        "name": "Continue pretraining",
        "kind": "train",
        "command": "{python}",
        "args": [script, "--release", str(release)],
        "resume": SEED_RESUME,
        "status": "approval-required",
        **extra,
    }


def texts(lines: list[dict[str, Any]]) -> list[str]:
    return [line["text"] for line in lines]


async def test_an_interpreter_given_E_streams_unflushed_prints_live_and_in_utf8(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(SEED_TRAINER, root / "seed_trainer.py")
    release = tmp_path / "release"
    write_manifest(root, {"jobs": [seed_job("seed_trainer.py", release)]})
    client = await start_server(root, init_options={"python": [sys.executable, "-E"]})
    try:
        run = await client.call("arena/start", {"id": "pretrain", "approved": True})
        # The trainer printed without flushing and is still running (it waits for `release`):
        # its lines arrive now only because the agent added -u after -E.
        await wait_for(
            lambda: any("\u2713" in text for text in texts(client.log_lines)), what="the unflushed UTF-8 line"
        )
        assert not release.exists()
        lines = texts(client.log_lines)
        assert "caf\u00e9 \u2713 \u65e5\u672c" in lines
        assert "utf8_mode=1 encoding=utf-8 ignore_env=1" in lines
        starting = next(
            text for text in texts(await all_logs(client, run["runId"])) if text.startswith("starting")
        )
        assert f"{sys.executable} -E -u -X utf8 seed_trainer.py" in starting
        release.write_text("go")
        await wait_status(client, run["runId"], "succeeded")
    finally:
        release.write_text("go")  # a failed assertion never leaves the trainer waiting
        await stop_server(client)


async def test_a_trainer_in_a_roots_folder_runs_gated_and_one_elsewhere_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    folder = tmp_path / "E" / "train"
    folder.mkdir(parents=True)
    shutil.copy(SEED_TRAINER, folder / "train.py")
    (folder / "ungated.py").write_text("print('a trainer that saves nothing')\n")
    release = tmp_path / "release"
    jobs = [
        seed_job(str(folder / "train.py"), release, cwd=str(folder)),
        {**seed_job(str(folder / "ungated.py"), release), "id": "ungated"},
    ]
    write_manifest(root, {"roots": ["../E/train"], "jobs": jobs})
    client = await start_server(root)
    try:
        status = await judged_status(client)  # a status never waits for the gates (issue 38)
        infos = {info["id"]: info for info in status["jobs"]}
        assert infos["pretrain"]["runnable"], infos["pretrain"]
        # Gated like a workspace trainer: the one that fails the gates is blocked by them.
        assert not infos["ungated"]["runnable"]
        assert {"AR004", "AR007"} <= {d["code"] for d in infos["ungated"]["blockedBy"]}
        refused = await client.call_error("arena/start", {"id": "ungated", "approved": True})
        assert refused.code == 1004
        # Watched like one: opening the trainer there publishes its diagnostics.
        uri = open_doc(client, folder / "ungated.py", (folder / "ungated.py").read_text())
        await wait_for(lambda: "AR004" in codes(client, uri), what="the gates of a trainer in a root")
        run = await client.call("arena/start", {"id": "pretrain", "approved": True})
        spec = json.loads((run_dir(root, run["runId"]) / "spec.json").read_text())
        assert spec["allowedRoots"] == [str(root.resolve()), str(folder.resolve())]
        assert spec["cwd"] == str(folder.resolve())
        await wait_for(
            lambda: any(t.startswith("started") for t in texts(client.log_lines)), what="the start"
        )
        release.write_text("go")
        await wait_status(client, run["runId"], "succeeded")
    finally:
        release.write_text("go")  # a failed assertion never leaves the trainer waiting
        await stop_server(client)
    # The same manifest without `roots`: every path there is outside the workspace (AR110).
    write_manifest(root, {"jobs": jobs})
    client = await start_server(root)
    try:
        refused = await client.call_error("arena/start", {"id": "pretrain", "approved": True})
        assert refused.code == 1006
        assert "AR110" in {d["code"] for d in refused.data["diagnostics"]}
    finally:
        await stop_server(client)


async def test_stages_are_listed_blocked_and_approval_always_asks_for_every_start(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(SEED_TRAINER, root / "seed_trainer.py")
    release = root / "release"
    release.write_text("go")
    document = {
        "approval": "always",
        "jobs": [
            {
                "id": "verify-release",
                "command": "{python}",
                "args": ["seed_trainer.py", "--release", str(release)],
                "status": "ready",
            }
        ],
        "stages": [{"id": "pretrain", "status": "approval-required"}, {"id": "posttrain"}],
    }
    write_manifest(root, document)
    client = await start_server(root)
    try:
        status = await client.call("arena/status", {})
        infos = {info["id"]: info for info in status["jobs"]}
        assert infos["verify-release"]["status"] == "approval-required"
        for stage in ("pretrain", "posttrain"):
            assert infos[stage]["status"] == "stage" and infos[stage]["runnable"] is False
            [blocked] = infos[stage]["blockedBy"]
            assert blocked["code"] == "AR115" and "no command" in blocked["message"]
        refused = await client.call_error("arena/start", {"id": "verify-release"})
        assert refused.code == 1002
        stage = await client.call_error("arena/start", {"id": "pretrain", "approved": True})
        assert stage.code == 1001 and "stage" in stage.message
        run = await client.call("arena/start", {"id": "verify-release", "approved": True})
        await wait_status(client, run["runId"], "succeeded")
    finally:
        await stop_server(client)


async def test_gates_severity_makes_ar010_block_the_job(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    trainer = WELL_WRITTEN.read_text().replace(
        '"--num-workers", type=int, default=0', '"--num-workers", type=int, default=4'
    )
    (root / "train.py").write_text(trainer)
    job = {"id": "lm", "kind": "train", "command": "{python}", "args": ["train.py"], "resume": SEED_RESUME,
           "status": "ready"}  # fmt: skip
    write_manifest(root, {"jobs": [job]})
    for severity, runnable in ((None, True), ("error", False), ("information", True)):
        options = {"gates": {"severity": {"AR010": severity}}} if severity else {}
        client = await start_server(root, init_options=options)
        try:
            uri = open_doc(client, root / "train.py", trainer)
            await wait_for(lambda c=client, u=uri: "AR010" in codes(c, u), what="AR010")
            found = {d.severity for d in client.diagnostics[uri] if d.code == "AR010"}
            assert found == {{None: 2, "error": 1, "information": 3}[severity]}, (severity, found)
            info = next(i for i in (await client.call("arena/status", {}))["jobs"] if i["id"] == "lm")
            assert info["runnable"] is runnable, (severity, info)
        finally:
            await stop_server(client)


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


async def test_a_stop_or_kill_of_a_run_whose_checkpoint_is_old_asks_first(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copy(SEED_TRAINER, root / "seed_trainer.py")
    job = seed_job("seed_trainer.py", root / "release", status="ready")
    job["args"] += ["--checkpoints", "2"]
    write_manifest(root, {"jobs": [job]})
    client = await start_server(root)
    try:
        run = await client.call("arena/start", {"id": "pretrain"})

        def old_enough() -> bool:
            """The trainer's own lines show the last checkpoint older than twice its cadence, in
            time and in steps (checkpoints at steps 10 and 20: a step past 40)."""
            lines = [line for line in client.log_lines if line["text"].startswith("@arena")]
            marks = [_epoch(line["at"]) for line in lines if '"checkpoint"' in line["text"]]
            if len(marks) < 2:
                return False
            limit = 2 * (marks[1] - marks[0]) + 0.3
            return any(
                _epoch(line["at"]) - marks[1] > limit
                and json.loads(line["text"][len("@arena ") :])["step"] > 40
                for line in lines
                if '"progress"' in line["text"]
            )

        await wait_for(old_enough, what="progress well past the last checkpoint")
        for params in ({"id": "pretrain"}, {"id": "pretrain", "kill": True}):
            refused = await client.call_error("arena/stop", params)
            assert refused.code == 1007, (params, refused)
            data = refused.data
            assert data["reason"] == "no-checkpoint"
            assert data["lastCheckpoint"]["step"] == 20 and data["lastCheckpoint"]["path"] == "ckpt-20.pt"
            assert data["lost"]["steps"] > 0 and data["lost"]["seconds"] > 0
            assert "confirm: true" in refused.message
        assert (await client.call("arena/status", {}))["active"]["status"] == "running"  # nothing was stopped
        stopped = await client.call("arena/stop", {"id": "pretrain", "confirm": True})
        assert stopped["status"] == "stopped" and stopped["runId"] == run["runId"]
    finally:
        await stop_server(client)
