"""``arena/stop`` of a cluster run while its head is down (issue 24 item 8).

Before: the stop waited out its bound (grace + 30 s) and answered a ``running`` RunInfo, with
no error. Now: an error naming the cluster as soon as the agent finds it cannot pass the stop
on, while the agent keeps asking; once the head answers, the stop reaches Ray and the run
ends ``stopped``. A real head, behind ``HeadProxy``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.cluster.conftest import RayHead
from tests.cluster.support import HeadProxy, head_job, options, train_workspace
from tests.helpers.lsp import all_logs, poll_until, start_server, stop_server, wait_status

LONG = 180.0


async def test_a_stop_while_the_head_is_down_answers_an_error_naming_the_cluster_and_stops_once_it_answers(
    tmp_path: Path, ray_head: RayHead
) -> None:
    root = train_workspace(
        tmp_path,
        "steady",
        "--steps 100000 --interval 0.05 --numbered --ckpt-every 2",
        stop={"method": "signal", "graceSeconds": 30},
    )
    with HeadProxy(ray_head) as proxy:
        client = await start_server(root, init_options=options(ray_head, address=proxy.address))
        try:
            info = await client.call("arena/start", {"id": "steady"})
            run_id, sid = info["runId"], info["cluster"]["submissionId"]
            await wait_status(client, run_id, "running", timeout=LONG)

            async def checkpointed() -> bool:
                status = await client.call("arena/status", {})
                run = next(r for r in status["runs"] if r["runId"] == run_id)
                return run.get("lastCheckpoint") is not None

            await poll_until(checkpointed, "a checkpoint (a stop with one needs no confirm)", LONG)

            proxy.mode = "reset"  # the head goes away
            refused = await asyncio.wait_for(client.call_error("arena/stop", {"id": "steady"}), LONG)
            assert (refused.code, (refused.data or {}).get("reason")) == (1013, "cluster-unreachable"), (
                refused
            )
            assert "cluster 'lab'" in refused.message and refused.data["cluster"] == "lab", refused
            assert refused.data["runId"] == run_id
            job = head_job(ray_head, sid)
            assert job is not None and job["status"] == "RUNNING", "the stop never reached Ray"
            status = await client.call("arena/status", {})
            run = next(r for r in status["runs"] if r["runId"] == run_id)
            assert run["status"] in ("running", "stopping"), "followed, not given up"

            proxy.mode = "pass"  # the head answers again: the stop asked for reaches it
            final = await wait_status(client, run_id, "stopped", "succeeded", "crashed", "lost", timeout=LONG)
            assert final["status"] == "stopped", final
            job = head_job(ray_head, sid)
            assert job is not None and job["status"] == "STOPPED", job
            lines = [line["text"] for line in await all_logs(client, run_id)]
            assert any(t.startswith(f"asked cluster 'lab' to stop {sid}") for t in lines), lines[-10:]
        finally:
            await stop_server(client)
