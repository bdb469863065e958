"""Full disks, end to end: a full state folder, a disk that fills during a run, a trainer's ENOSPC.

Where the machine lets the tests mount a small filesystem (root: a tmpfs),
the disk is really full. Where it does not, those tests are skipped with the
reason, and the one that needs no root injects the fault instead: a
``sitecustomize`` on the server's ``PYTHONPATH`` makes every ``state.json``
write fail with ENOSPC, in the server and in the agents it starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    job,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

STATE_WRITES_FAIL = """
import errno, os
_real_replace = os.replace
def _full_replace(src, dst, *args, **kwargs):
    if str(dst).endswith("state.json"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
    return _real_replace(src, dst, *args, **kwargs)
os.replace = _full_replace
"""


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``where``; the test is skipped where mounting is not allowed."""
    where.mkdir(parents=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       check=True, capture_output=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        pytest.skip(f"cannot mount a small filesystem here (needs root): {error}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True, timeout=30)


def fill(where: Path) -> Path:
    """Fill the filesystem at ``where`` to the last byte; return the filler file.

    Plain ``os.write`` calls, no buffered file: a buffered writer keeps the
    tail of a block that did not fit and writes it again when closed, so the
    close itself would fail with ENOSPC whenever the free space ended inside
    a block's last buffer-full.
    """
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for block in (b"\0" * (64 << 10), b"\0"):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)  # a short write is followed by one that fails
    finally:
        os.close(fd)
    return filler


async def _refused_quickly(client: ArenaClient, job_id: str) -> None:
    error = await client.call_error("arena/start", {"id": job_id})
    assert error.code in (1005, 1009), error
    if error.code == 1009:
        assert error.data["reason"] == "launch-failed" and error.data["evidence"]
    status = await client.call("arena/status", {})
    assert status["active"] is None, "nothing is left starting with no pid"


async def test_a_state_folder_that_refuses_every_write_answers_1009(tmp_path: Path) -> None:
    """The agent dies before recording anything: 1009 with the cause, not a 30 s wait."""
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "2")])
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(STATE_WRITES_FAIL)
    client = await start_server(root, env={"PYTHONPATH": str(inject)})
    try:
        error = await client.call_error("arena/start", {"id": "quick"})
        assert (error.code, error.data["reason"]) == (1009, "launch-failed")
        assert "No space left on device" in error.data["evidence"]
        status = await client.call("arena/status", {})
        assert status["active"] is None
        failed = next(r for r in status["runs"] if r["runId"] == error.data["runId"])
        assert failed["status"] == "lost" and failed["failure"]["kind"] == "disk-full"
        assert not (root / ".aide" / "training" / "active.lock").exists(), "the workspace is free"
    finally:
        await stop_server(client)


async def test_a_full_state_folder_refuses_the_start(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "2")])
    with small_filesystem(tmp_path / "small", "1m") as small:
        client = await start_server(root, init_options={"stateDir": str(small / "state"),
                                                        "preflight": {"minFreeDiskMb": 0}})  # fmt: skip
        try:
            await client.call("arena/status", {})
            fill(small)
            await _refused_quickly(client, "quick")
        finally:
            await stop_server(client)


BIG_LINES = """
import pathlib, time
for step in range(1, 1_000_000):
    print(f"step {step} " + "x" * 8192, flush=True)
    pathlib.Path("printed.tmp").write_text(str(step))
    pathlib.Path("printed.tmp").replace("printed")
    time.sleep(0.1)
"""
"""A trainer whose every line needs new pages of the log file (so a write after the fill fails),
and which says outside the full disk how many lines it has printed."""


def printed(root: Path) -> int:
    try:
        return int((root / "printed").read_text())
    except (OSError, ValueError):
        return 0


async def test_a_disk_that_fills_during_a_run_does_not_stop_it(tmp_path: Path) -> None:
    spec = {"id": "big", "name": "Big", "kind": "task", "command": "{python}", "args": ["big_lines.py"],
            "status": "ready"}  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    (root / "big_lines.py").write_text(BIG_LINES)
    with small_filesystem(tmp_path / "small", "8m") as small:
        client = await start_server(root, init_options={"stateDir": str(small / "state"),
                                                        "preflight": {"minFreeDiskMb": 1}})  # fmt: skip
        try:
            info = await client.call("arena/start", {"id": "big"})
            await wait_for(lambda: any(x["text"].startswith("step 3 ") for x in client.log_lines))
            filler = fill(small)
            after_fill = printed(root)
            full = await _wait_failure(client, info["runId"], "disk-full")
            assert full["status"] == "running" and full["pid"] == info["pid"] and full["restarts"] == 0
            await wait_for(lambda: printed(root) >= after_fill + 3, what="lines printed onto the full disk")
            filler.unlink()
            summary = await wait_for(
                lambda: next((x for x in client.log_lines if "could not be written" in x["text"]), None),
                what="the summary of the lines not written",
            )
            assert "No space left on device" in summary["text"]
            recovered = await _wait_failure(client, info["runId"], None)
            assert recovered["status"] == "running" and recovered["pid"] == info["pid"]
            stopped = await client.call("arena/stop", {"kill": True, "confirm": True})
            assert stopped["status"] == "stopped" and stopped["restarts"] == 0
            texts = [x["text"][:40] for x in await all_logs(client, info["runId"])]
            assert "writes succeed again: the disk has space" in texts
        finally:
            await _stop_everything(client)


async def _stop_everything(client: ArenaClient) -> None:
    """Whatever happened, leave no run going (its filesystem is about to be unmounted)."""
    with contextlib.suppress(Exception):
        await client.call("arena/stop", {"kill": True, "confirm": True})
    await stop_server(client)


async def _wait_failure(client: ArenaClient, run_id: str, kind: str | None) -> dict[str, Any]:
    """Wait until ``arena/status`` reports the run with this failure kind (None: no failure)."""
    latest: dict[str, Any] = {}

    async def reported() -> bool:
        status = await client.call("arena/status", {})
        latest.update(next(r for r in status["runs"] if r["runId"] == run_id))
        return (latest["failure"] or {}).get("kind") == kind

    await poll_until(reported, f"run {run_id} to report failure {kind}")
    return latest


async def test_a_trainer_that_dies_of_enospc_is_disk_full(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small", "1m") as small:
        writer = {"id": "writer", "name": "Writer", "kind": "task", "command": "{python}",
                  "args": ["write_big.py", str(small / "big.bin")], "status": "ready"}  # fmt: skip
        root = make_workspace(tmp_path / "ws", [writer])
        (root / "write_big.py").write_text(
            "import sys\nprint('writing', flush=True)\n"
            "with open(sys.argv[1], 'wb') as f:\n    f.write(b'x' * (8 << 20))\n"
        )
        client = await start_server(root)
        try:
            info = await client.call("arena/start", {"id": "writer"})
            final = await wait_status(client, info["runId"], "crashed", "succeeded")
            assert final["failure"]["kind"] == "disk-full", final["failure"]
            assert str(errno.ENOSPC) in final["failure"]["evidence"]
        finally:
            await stop_server(client)
