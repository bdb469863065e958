"""Runs on disk from main's agents (their ``arena`` lines plain text) read as runs written today.

The same story (a launch, progress, a kill, a relaunch from step 5, the end) is written
twice into a state folder: once in the words main's agents wrote as plain lines, once as
today's typed records (``agent_records``). A fresh server must show both the same:
the same ``arena/logs`` lines (the contract's words), the same status, restarts and step,
the same insights, and the same relaunch in ``arena/metrics``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arena_ls.run import agent_records
from arena_ls.run.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.run.rundir import CheckpointRecord, RunDir, RunState
from arena_ls.run.states import RunStatus
from tests.helpers.lsp import all_logs, job, make_workspace, start_server, stop_server, wait_status


def progress(step: int) -> str:
    return f'@arena {{"event": "progress", "step": {step}, "total": 10, "loss": {1 / step}}}'


FIRST = ["py", "train.py", "--steps", "10"]
SECOND = [*FIRST, "--resume", "5"]
STORY: list[tuple[int, str, agent_records.AgentRecord | None]] = [
    (ARENA, "starting quick: " + " ".join(FIRST), agent_records.starting("quick", FIRST)),
    *[(STDOUT, progress(step), None) for step in range(1, 6)],
    (STDOUT, '@arena {"event": "checkpoint", "step": 5, "path": "ckpt.pt"}', None),
    (ARENA, "job was killed by SIGKILL", agent_records.exited(None, "SIGKILL")),
    (ARENA, "TRAINING_CRASHED: quick code -9", agent_records.crashed("quick", -9, "SIGKILL")),
    (ARENA, "failure: killed: killed by SIGKILL", agent_records.failure("killed", "killed by SIGKILL")),
    (ARENA, "restarting from step 5 (attempt 1/3) in 0.25s", agent_records.restarting(5, 1, 3, 0.25)),
    (ARENA, "warning: loss is nan at step 7", agent_records.warning("loss is nan at step 7")),
    (ARENA, "starting quick: " + " ".join(SECOND), agent_records.starting("quick", SECOND)),
    *[(STDOUT, progress(step), None) for step in range(6, 11)],
    (ARENA, "job exited with code 0", agent_records.exited(0, None)),
    (ARENA, "quick finished", agent_records.finished("quick")),
    (ARENA, "run ended: succeeded", agent_records.ended("succeeded")),
]  # fmt: skip


def write_run(template: Path, run_id: str, typed: bool) -> None:
    """The story as main's agent wrote it (``typed`` False) or as today's agents write it."""
    run = RunDir(template.parent / run_id)
    run.path.mkdir()
    spec = json.loads((template / "spec.json").read_text())
    (run.path / "spec.json").write_text(json.dumps({**spec, "runId": run_id, "jobId": "quick"}))
    writer = OutputWriter(run.path)
    for stream, words, event in STORY:
        writer.append_line(stream, event.encode() if typed and event is not None else words)
    writer.close()
    checkpoint = CheckpointRecord(step=5, path="ckpt.pt", at=1.0, run_id=run_id)
    state = RunState(run_id=run_id, job_id="quick", status=RunStatus.SUCCEEDED, restarts=1, step=10)
    state.total_steps, state.exit_code, state.last_checkpoint = 10, 0, checkpoint
    run.write_state(state)


def shown(info: dict[str, Any]) -> dict[str, Any]:
    keep = ("status", "restarts", "step", "totalSteps", "exitCode", "insights", "lastCheckpoint")
    return {key: info.get(key) for key in keep}


async def test_a_run_written_by_mains_agent_reads_as_one_written_today(tmp_path: Path) -> None:
    make_workspace(tmp_path, [job("quick", "--steps", "1")])
    client = await start_server(tmp_path)
    try:
        info = await client.call("arena/start", {"id": "quick"})
        await wait_status(client, info["runId"], "succeeded")
        template = Path(info["logPath"]).parent
    finally:
        await stop_server(client)
    write_run(template, "quick-old-000001", typed=False)
    write_run(template, "quick-new-000001", typed=True)
    raw = (template.parent / "quick-new-000001" / "output.log").read_text()
    assert "TRAINING_CRASHED" not in raw and '"kind":"crashed"' in raw, "today's agents write records"
    client = await start_server(tmp_path)  # a fresh server: it knows the runs only by their files
    try:
        old_lines = await all_logs(client, "quick-old-000001")
        new_lines = await all_logs(client, "quick-new-000001")
        expected = [(("arena" if stream == ARENA else "stdout"), words) for stream, words, _ in STORY]
        assert [(line["stream"], line["text"]) for line in old_lines] == expected
        assert [(line["stream"], line["text"]) for line in new_lines] == expected
        runs = {run["runId"]: run for run in (await client.call("arena/runs", {"limit": 10}))["runs"]}
        old, new = shown(runs["quick-old-000001"]), shown(runs["quick-new-000001"])
        assert old == new and old["status"] == "succeeded" and old["restarts"] == 1
        old_metrics = await client.call("arena/metrics", {"runId": "quick-old-000001"})
        new_metrics = await client.call("arena/metrics", {"runId": "quick-new-000001"})
        assert [r["step"] for r in old_metrics["relaunches"]] == [5]
        assert [r["step"] for r in new_metrics["relaunches"]] == [5]
        old_points = [(p["step"], p["loss"]) for p in old_metrics["points"]]
        assert len(old_points) == 10 and old_points == [(p["step"], p["loss"]) for p in new_metrics["points"]]
    finally:
        await stop_server(client)
