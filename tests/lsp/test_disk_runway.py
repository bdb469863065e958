"""``disk-runway`` end to end (contract 8.2): a real server, agent and trainer writing real checkpoints.

Two disks that are too small for the run: a real tmpfs of 48 MB holding the
checkpoints (mounted by the test; skipped with the reason where that needs
root and the test is not root), and, where no mount is allowed, the free
space read through the injected hardware (``tests/helpers/fake_hardware.py``)
while the checkpoints are really written. The trainer writes 256 KB every
10 steps of 0.05 s (about 30 MB a minute) and has 100,000 steps to go.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.helpers.lsp import ArenaClient, job, make_workspace, start_server, stop_server, wait_for
from tests.lifecycle.test_full_disk import small_filesystem
from tests.lsp.test_health_and_preflight import fake_client


def writer(folder: Path) -> dict[str, Any]:
    args = ["--steps", "100000", "--interval", "0.05", "--ckpt-every", "10"]
    return job("big", *args, "--ckpt-bytes", str(256 * 1024), "--ckpt-dir", str(folder), kind="train")


def runway(client: ArenaClient, run_id: str) -> dict[str, Any] | None:
    for info in reversed(client.statuses):
        if info["runId"] == run_id:
            found = [i for i in info.get("insights") or [] if i["kind"] == "disk-runway"]
            if found:
                return dict(found[0])
    return None


async def finish(client: ArenaClient) -> None:
    await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


async def test_checkpoints_that_will_fill_a_small_tmpfs_trip_disk_runway(tmp_path: Path) -> None:
    root = tmp_path / "ws"  # the checkpoints' folder is named in the job's arguments: inside it (AR110)
    with small_filesystem(root / "small", "48m") as small:
        (small / "ckpts").mkdir()
        make_workspace(root, [writer(small / "ckpts")])
        client = await start_server(root)
        try:
            info = await client.call("arena/start", {"id": "big"})
            insight = await wait_for(lambda: runway(client, info["runId"]), what="disk-runway")
            message = insight["message"]
            assert insight["severity"] == "warning"
            assert message.startswith(f"at the rate the checkpoints in {small / 'ckpts'} grow"), message
            assert "fills in about" in message and "before the run's last step (step 100000" in message
        finally:
            await finish(client)


async def test_a_small_disk_read_through_the_injected_hardware_trips_disk_runway(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [writer(tmp_path / "ws" / "ckpts")])
    (root / "ckpts").mkdir()
    options = {"preflight": {"minFreeDiskMb": 10}}
    client, _ = await fake_client(root, {"diskFreeMb": 40}, init_options=options)
    try:
        info = await client.call("arena/start", {"id": "big"})
        insight = await wait_for(lambda: runway(client, info["runId"]), what="disk-runway")
        assert "(40 MB free) fills in about" in insight["message"], insight
        assert "the checkpoints in" in insight["message"] and "the run's log" in insight["message"]
    finally:
        await finish(client)


async def test_a_trainer_that_overwrites_one_checkpoint_never_trips_disk_runway(tmp_path: Path) -> None:
    """One file saved over and over: the run does not grow; the log's slow growth is no threat
    to 40 MB over a run of 20 s (the run ends before the disk would fill)."""
    spec = job("small", "--steps", "400", "--interval", "0.05", "--ckpt-every", "10", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client, _ = await fake_client(root, {"diskFreeMb": 40}, init_options={"preflight": {"minFreeDiskMb": 10}})
    try:
        info = await client.call("arena/start", {"id": "small"})
        await wait_for(
            lambda: any(s["runId"] == info["runId"] and s["status"] == "succeeded" for s in client.statuses),
            what="the end of the run",
        )
        assert not any(i["kind"] == "disk-runway" for s in client.statuses for i in s.get("insights") or [])
    finally:
        await finish(client)


async def test_a_start_whose_checkpoints_left_will_not_fit_is_refused_by_the_pre_flight(
    tmp_path: Path,
) -> None:
    """The job's first run kept every 1 MB checkpoint (one each 10 steps of 100,000): a start where
    it stopped still needs thousands of MB of checkpoints, and the (injected) disk has 100 MB with
    a 10 MB floor.

    The run is stopped once it saved step 30, but a loaded machine answers the stop seconds later:
    the steps are many so that the need stays far above the 100 MB wherever the run stopped (with
    1,000 steps, a stop that landed past step ~95 needed only 100 MB, and the start was allowed)."""
    args = ["--steps", "100000", "--interval", "0.05", "--ckpt-every", "10", "--ckpt-bytes", str(1 << 20)]
    spec = job("keeps", *args, "--ckpt-dir", str(tmp_path / "ws" / "ckpts"), kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    (root / "ckpts").mkdir()
    client, _ = await fake_client(
        root, {"diskFreeMb": 100}, init_options={"preflight": {"minFreeDiskMb": 10}}
    )
    try:
        first = await client.call("arena/start", {"id": "keeps"})
        await wait_for(
            lambda: any('"checkpoint", "step": 30' in line["text"] for line in client.log_lines),
            what="step 30",
        )
        stopped = await client.call("arena/stop", {"runId": first["runId"]})
        assert stopped["status"] == "stopped" and stopped["lastCheckpoint"]["step"] >= 30
        error = await client.call_error("arena/start", {"id": "keeps"})
        assert (error.code, error.data["reason"]) == (1005, "preflight-failed")
        disk = next(check for check in error.data["checks"] if check["name"] == "disk")
        assert not disk["ok"] and disk["message"].startswith(f"only 100 MB free at {root / 'ckpts'}, need ")
        need = int(re.match(r"only 100 MB free at .*?, need (\d+) MB", disk["message"]).group(1))  # type: ignore[union-attr]
        steps_left = 100_000 - stopped["lastCheckpoint"]["step"]
        # one save per 10 steps, or a little more often (the stop's own save counts in the cadence)
        assert steps_left // 10 <= need - 10 <= steps_left // 5, (need, stopped["lastCheckpoint"])
        assert (
            "saves of 1 MB left" in disk["message"]
            and "it keeps every checkpoint it saves" in disk["message"]
        )
    finally:
        await finish(client)
