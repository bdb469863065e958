"""``logs.keepRunsMb`` (contract 7.1, issue 23 failure 5): finished runs' logs are bounded.

All finished runs' logs of a workspace take at most the budget: at each start
the oldest finished runs go first, and the last run of each job is always kept.
On main 50 finished runs were kept whatever the size of their logs.
"""

from __future__ import annotations

from pathlib import Path

from arena_ls.lifecycle.retention import FinishedRun, runs_over_budget
from tests.helpers.lsp import make_workspace, run_dir, start_server, stop_server, wait_status

WRITES_40KB = "for i in range(400):\n    print(f'{i:05d} ' + 'x' * 94)\n"


def test_the_oldest_go_first_and_the_last_of_each_job_stays() -> None:
    runs = [
        FinishedRun("a1", "a", 1.0, 40),
        FinishedRun("a2", "a", 2.0, 40),
        FinishedRun("b1", "b", 3.0, 40),
        FinishedRun("a3", "a", 4.0, 40),
    ]
    assert runs_over_budget(runs, 1000) == []
    assert runs_over_budget(runs, 120) == ["a1"]
    assert runs_over_budget(runs, 80) == ["a1", "a2"]
    assert runs_over_budget(runs, 0) == ["a1", "a2"], "b1 and a3 are their jobs' last runs"
    assert runs_over_budget([FinishedRun("big", "a", 1.0, 10**12)], 0) == [], (
        "a job's last run, even alone over"
    )


async def test_finished_runs_logs_stay_within_keep_runs_mb(tmp_path: Path) -> None:
    jobs = [
        {
            "id": job_id,
            "name": job_id,
            "kind": "task",
            "command": "{python}",
            "args": ["writes.py"],
            "status": "ready",
        }
        for job_id in ("a", "b")
    ]
    root = make_workspace(tmp_path / "ws", jobs)
    (root / "writes.py").write_text(WRITES_40KB)
    client = await start_server(root, init_options={"logs": {"keepRunsMb": 0.1}})  # 104857 bytes
    try:
        started: list[str] = []
        for job_id in ("a", "a", "b", "a", "b"):
            info = await client.call("arena/start", {"id": job_id})
            await wait_status(client, info["runId"], "succeeded")
            started.append(info["runId"])
        a1, a2, b1, a3, b2 = started
        status = await client.call("arena/status", {})
        listed = {run["runId"] for run in status["runs"]}
        assert listed == {b1, a3, b2}, listed
        assert not run_dir(root, a1).exists() and not run_dir(root, a2).exists()
        kept = sum(
            (run_dir(root, run_id) / name).stat().st_size
            for run_id in (b1, a3)
            for name in ("output.log", "output.idx")
        )
        assert kept <= 0.1 * 1024 * 1024, kept
    finally:
        await stop_server(client)
