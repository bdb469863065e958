"""Issue 39 item 7: a 20 MB argv is refused before anything starts (on main: ``lost`` after 10 s)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from arena_ls import platform
from tests.helpers.lsp import job, make_workspace, start_server, stop_server


async def test_a_20_mb_argument_is_refused_before_anything_starts(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("t", "--steps", "3", "x" * (20 << 20), kind="train")])
    client = await start_server(root)
    try:
        error = await client.call_error("arena/start", {"id": "t"})
        assert (error.code, error.data["reason"]) == (1009, "launch-failed"), error
        assert "nothing was started" in error.message and "bytes, more than" in error.message, error.message
        status = await client.call("arena/status", {})
        assert status["runs"] == [] and status["active"] is None, status
        assert not (root / ".aide" / "training" / "runs").exists() or not any(
            (root / ".aide" / "training" / "runs").iterdir()
        )
    finally:
        await stop_server(client)


@pytest.mark.skipif(sys.platform == "win32", reason="the Linux limits")
def test_the_linux_limits() -> None:
    assert platform.command_line_refusal(["python", "x" * 1000], {"A": "b"}) is None
    assert "one argument" in (platform.command_line_refusal(["python", "x" * 200_000], {}) or "")
    many = ["y" * 100_000] * 100
    assert "command line and environment" in (platform.command_line_refusal(many, {}) or "")


def test_the_windows_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    assert platform.command_line_refusal(["python", "x" * 1000], {}) is None
    assert "Windows" in (platform.command_line_refusal(["python", "x" * 40_000], {}) or "")
