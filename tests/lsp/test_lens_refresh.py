"""The code lenses are refreshed when a run starts, also when no job list was built yet.

The first build of the job list lints every trainer of the manifest; the lens refresh that a
run's first status change asks for then runs those lints in a worker thread (never on the
event loop, issue 24) and the refresh follows once they are done. Behaviour only, never a time.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.lsp import (
    job,
    judged_status,
    make_workspace,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)


async def test_a_run_started_before_any_status_still_refreshes_the_lenses(tmp_path: Path) -> None:
    jobs = [
        job("quick", "--steps", "3"),
        *(job(f"train-{i}", "--steps", "5", kind="train") for i in range(8)),
    ]
    make_workspace(tmp_path, jobs)
    client = await start_server(tmp_path)
    try:
        assert client.lens_refreshes == 0
        info = await client.call("arena/start", {"id": "quick"})  # no status, no lens asked for before
        await wait_for(lambda: client.lens_refreshes >= 1, what="a codeLens refresh after the start")
        await wait_status(client, info["runId"], "succeeded")
        lenses = await judged_status(client)  # a status never waits for the gates (issue 38)
        assert all(j["runnable"] for j in lenses["jobs"]), "the lints ran: every job judged"
    finally:
        await stop_server(client)
