"""Figures a person can compare (issue 36): each relaunch's downtime and steps lost, end to end.

A real agent relaunches a real trainer that crashes 7 steps into each launch
(a checkpoint every 4 steps, 20 steps in all): each crash loses the 3 steps past its checkpoint,
and each relaunch is down from the crash to the relaunched trainer's first
progress, its backoff included. ``RunInfo.relaunches`` and the metrics'
``relaunches`` carry both; ``arena status`` and the plot say them.
"""

from __future__ import annotations

from pathlib import Path

from arena_ls.client.plot import stitch
from arena_ls.client.tables import relaunch_rows
from tests.helpers.lsp import job, make_workspace, start_server, stop_server, wait_status


async def test_every_relaunch_says_its_downtime_and_the_steps_it_lost(tmp_path: Path) -> None:
    args = ["--steps", "20", "--interval", "0.02", "--ckpt-every", "4", "--crash-after-progress", "7"]
    spec = job("crashy", *args, kind="train", restart={"maxRestarts": 3, "backoffSeconds": 0.2})
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        info = await client.call("arena/start", {"id": "crashy"})
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded", final
        relaunches = final["relaunches"]
        assert [r["fromStep"] for r in relaunches] == [4, 8, 12, 16]  # crashes at steps 7, 11, 15, 19
        assert [r["stepsLost"] for r in relaunches] == [3, 3, 3, 3]
        for relaunch, backoff in zip(relaunches, (0.2, 0.4, 0.8, 1.6), strict=True):
            assert relaunch["downtimeSeconds"] >= backoff, relaunch  # the backoff is part of it
            assert relaunch["crashedAt"] <= relaunch["at"]
        metrics = await client.call("arena/metrics", {"runId": info["runId"]})
        logged = [(r["step"], r["stepsLost"]) for r in metrics["relaunches"]]
        assert logged == [(4, 3), (8, 3), (12, 3), (16, 3)]
        downtimes = [r["downtimeSeconds"] for r in relaunches]
        assert [r["downtimeSeconds"] for r in metrics["relaunches"]] == downtimes
        rows = relaunch_rows(relaunches)
        assert rows[0] == f"from step 4 · 3 steps lost · {downtimes[0]:.1f} s down"
        curve = stitch([(final, metrics)])
        assert [mark.words() for mark in curve.resumes] == [
            f"relaunch · 3 steps lost · {down:.1f} s down" for down in downtimes
        ]
    finally:
        await client.call("arena/stop", {"kill": True, "confirm": True})
        await stop_server(client)
