"""Scale (issue 24): a manifest of 500 jobs, 5,000 finished runs, 1,000,000 checkpoints.

Behaviour only, never time: every job listed and judged, a status request
answered while a long diagnostics pass is still running (shown by the order
in which the client receives the answers and the diagnostics), the history
paged with every run exactly once, the metrics paged to their end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lsprotocol import types

from arena_ls.run.outputlog import STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunState
from arena_ls.run.states import RunStatus
from tests.helpers.history import clone_runs
from tests.helpers.lsp import (
    FAKE_TRAINER,
    ArenaClient,
    job,
    judged_status,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

BAD_TRAINER = "import torch\nfor step in range(10):\n    loss = step\n"


def big_manifest(root: Path) -> list[dict[str, Any]]:
    """250 train jobs of the fake trainer, 250 task jobs, and one train job whose trainer fails."""
    jobs = [job(f"train-{i}", "--steps", "5", kind="train") for i in range(250)]
    jobs += [job(f"task-{i}", "--steps", "1") for i in range(250)]
    jobs.append(job("bad", kind="train", script="bad.py", args=["bad.py"]))
    make_workspace(root, jobs)
    (root / "bad.py").write_text(BAD_TRAINER)
    return jobs


async def test_a_manifest_of_500_jobs_is_listed_whole_and_judged(tmp_path: Path) -> None:
    jobs = big_manifest(tmp_path)
    client = await start_server(tmp_path)
    try:
        status = await judged_status(client)  # a status never waits for the gates (issue 38)
        listed = {info["id"]: info for info in status["jobs"]}
        assert [info["id"] for info in status["jobs"]] == [j["id"] for j in jobs], "every job, in order"
        assert all(listed[f"train-{i}"]["runnable"] for i in range(250))
        assert all(listed[f"task-{i}"]["runnable"] for i in range(250))
        assert not listed["bad"]["runnable"] and listed["bad"]["blockedBy"]
        again = await client.call("arena/status", {})
        assert again["jobs"] == status["jobs"]
        (tmp_path / "bad.py").write_text(FAKE_TRAINER.read_text())  # fixed: the next status says so
        await wait_for_runnable(client, "bad")
    finally:
        await stop_server(client)


async def wait_for_runnable(client: ArenaClient, job_id: str) -> None:
    async def runnable() -> bool:
        status = await client.call("arena/status", {})
        return any(info["id"] == job_id and info["runnable"] for info in status["jobs"])

    await poll_until(runnable, f"job {job_id} to become runnable")


def record_order(client: ArenaClient, uri: str) -> list[str]:
    """What the client receives, in order: ``status`` for each status answer, ``diagnostics`` for
    each publish of ``uri``."""
    order: list[str] = []
    protocol = client.protocol
    handle = protocol.handle_message

    def handle_and_record(message: Any) -> Any:
        result = getattr(message, "result", None)
        if isinstance(result, dict) and "jobs" in result:
            order.append("status")
        params = getattr(message, "params", None)
        if getattr(message, "method", None) == types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS:
            target = params.get("uri") if isinstance(params, dict) else getattr(params, "uri", None)
            if target == uri:
                order.append("diagnostics")
        return handle(message)

    protocol.handle_message = handle_and_record  # type: ignore[method-assign]
    return order


async def test_a_status_request_sent_during_a_long_diagnostics_pass_is_answered_before_it_ends(
    tmp_path: Path,
) -> None:
    big_manifest(tmp_path)
    trainer = tmp_path / "train.py"  # any train.py is a trainer: its buffer is linted on open
    trainer.write_text(FAKE_TRAINER.read_text())
    client = await start_server(tmp_path)
    try:
        await judged_status(client)  # the manifest parsed and its trainers judged (the list built)
        uri = trainer.as_uri()
        order = record_order(client, uri)
        helpers = "".join(f"def helper_{i}(a):\n    return a + {i}\n" for i in range(80_000))
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(
                    uri=uri, language_id="python", version=1, text=FAKE_TRAINER.read_text() + helpers
                )
            )
        )
        await client.call("arena/status", {})  # answered as the pass begins (its timer is due)
        await client.call("arena/status", {})  # sent while the pass lints 160,000 lines
        await wait_for(lambda: "diagnostics" in order, what="the buffer's diagnostics")
        assert order[:3] == ["status", "status", "diagnostics"], order
    finally:
        await stop_server(client)


async def finished_template(client: ArenaClient, root: Path) -> Path:
    info = await client.call("arena/start", {"id": "quick"})
    await wait_status(client, info["runId"], "succeeded")
    return Path(info["logPath"]).parent


async def test_5000_finished_runs_are_paged_and_each_listed_exactly_once(tmp_path: Path) -> None:
    make_workspace(tmp_path, [job("quick", "--steps", "1")])
    client = await start_server(tmp_path)
    try:
        template = await finished_template(client, tmp_path)
        clone_runs(tmp_path, template, 4999)
        status = await client.call("arena/status", {})
        assert status["runsTotal"] == 5000
        assert len(status["runs"]) == 50, "the newest 50 by default"
        assert status["runs"][-1]["runId"] == template.name, "oldest first, the newest last"
        assert [r["runId"] for r in status["runs"][:2]] == ["quick-clone-004950", "quick-clone-004951"]
        few = await client.call("arena/status", {"runsLimit": 3})
        assert [r["runId"] for r in few["runs"]] == [
            "quick-clone-004997",
            "quick-clone-004998",
            template.name,
        ]
        assert (await client.call("arena/status", {"runsLimit": 0}))["runs"] == []
        seen: list[str] = []
        before = None
        while True:
            page = await client.call("arena/runs", {"before": before, "limit": 700})
            assert len(page["runs"]) <= 700
            seen += [run["runId"] for run in page["runs"]]
            before = page["next"]
            if before is None:
                break
        expected = [template.name] + [f"quick-clone-{i:06d}" for i in reversed(range(4999))]
        assert seen == expected, "every run exactly once, newest first"
        old = await client.call("arena/runs", {"before": "quick-clone-000002", "limit": 5})
        assert [r["runId"] for r in old["runs"]] == ["quick-clone-000001", "quick-clone-000000"]
        assert old["next"] is None and old["runs"][0]["status"] == "succeeded"
        oldest = await client.call("arena/logs", {"runId": "quick-clone-000000"})
        assert oldest["lines"], "an old run no view follows is still read by its id"
    finally:
        await stop_server(client)


async def test_bad_paging_params_are_refused_naming_the_field(tmp_path: Path) -> None:
    make_workspace(tmp_path, [job("quick", "--steps", "1")])
    client = await start_server(tmp_path)
    try:
        for method, params, name in [
            ("arena/status", {"runsLimit": -1}, "runsLimit"),
            ("arena/status", {"runsLimit": "ten"}, "runsLimit"),
            ("arena/status", {"runsLimit": 10**6}, "runsLimit"),
            ("arena/runs", {"limit": 0}, "limit"),
            ("arena/runs", {"before": 7}, "before"),
            ("arena/runs", {"before": "no-such-run"}, "before"),
            ("arena/metrics", {"limit": 0}, "limit"),
            ("arena/metrics", {"cursor": "m1.x"}, "cursor"),
            ("arena/metrics", {"cursor": 12}, "cursor"),
        ]:
            error = await client.call_error(method, params)
            assert error.code == -32602 and name in str(error), (method, params, error)
    finally:
        await stop_server(client)


def write_checkpoint_run(root: Path, template: Path, count: int) -> str:
    """A finished run whose log announced ``count`` checkpoints (written as an agent writes logs)."""
    run_id = "ckpt-run-000001"
    run = RunDir(template.parent / run_id)
    run.path.mkdir()
    spec = json.loads((template / "spec.json").read_text())
    (run.path / "spec.json").write_text(json.dumps({**spec, "runId": run_id, "jobId": "quick"}))
    writer = OutputWriter(run.path)
    block: list[str] = []
    for step in range(1, count + 1):
        block.append(f'@arena {{"event": "checkpoint", "step": {step}, "path": "c/{step}.pt"}}\n')
        if step % 1000 == 0:
            block.append(f'@arena {{"event": "progress", "step": {step}, "loss": 1.5}}\n')
        if len(block) >= 800:
            writer.append(STDOUT, "".join(block).encode())
            block = []
    if block:
        writer.append(STDOUT, "".join(block).encode())
    writer.close()
    run.write_state(RunState(run_id=run_id, job_id="quick", status=RunStatus.SUCCEEDED))
    return run_id


async def test_a_million_checkpoints_are_paged_every_one_once(tmp_path: Path) -> None:
    make_workspace(tmp_path, [job("quick", "--steps", "1")])
    client = await start_server(tmp_path)
    try:
        template = await finished_template(client, tmp_path)
        run_id = write_checkpoint_run(tmp_path, template, 1_000_000)
        expected_step = 1
        points = pages = 0
        cursor = None
        while True:
            page = await client.call("arena/metrics", {"runId": run_id, "cursor": cursor})
            pages += 1
            assert len(page["checkpoints"]) <= 10_000 and len(page["points"]) <= 10_000
            for checkpoint in page["checkpoints"]:
                assert checkpoint["step"] == expected_step
                expected_step += 1
            points += len(page["points"])
            cursor = page["next"]
            if cursor is None:
                break
        assert expected_step == 1_000_001 and points == 1000
        assert pages == 101, "100 full pages; the progress line after the last checkpoint is the 101st"
        small = await client.call("arena/metrics", {"runId": run_id, "limit": 3})
        assert [c["step"] for c in small["checkpoints"]] == [1, 2, 3] and small["next"]
    finally:
        await stop_server(client)
