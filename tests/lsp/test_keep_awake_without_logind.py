"""``RunInfo.keepAwake`` null through a real arena-ls on a machine without logind (contract 8.3):
no system bus to ask (this CI machine has none; the test points the system bus at a socket that
does not exist, so a developer's machine with one answers the same), the run goes on, and its log
says why in the line the clients read from its first page; ``arena status`` shows it. The
fake-logind ``true`` case is tests/lsp/test_laptop_settings.py's; the agent alone,
tests/lifecycle/test_keep_awake_agent.py's."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from arena_ls.client.keep_awake import REASON_LOG_LINES, keep_awake_reason, keep_awake_text
from arena_ls.platform_awake import LOGIND_BUS_ENV
from tests.client.support import run_arena
from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    job,
    make_workspace,
    poll_until,
    start_server,
    stop_server,
    wait_status,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="logind is Linux's")

FLOOD = 300
"""A chatty start (a config dump, a framework's warnings) that the trainer prints before the agent,
started after it for speed, decides: the agent's line still comes in the first page the clients read."""


def no_logind(tmp_path: Path) -> dict[str, str]:
    return {LOGIND_BUS_ENV: "", "DBUS_SYSTEM_BUS_ADDRESS": f"unix:path={tmp_path / 'no-system-bus'}"}


async def reason_in_first_page(client: ArenaClient, run_id: str) -> str:
    """The reason, once the agent has said it (it decides just after the trainer starts)."""
    said: list[str] = []

    async def has_said() -> bool:
        page = await client.call("arena/logs", {"runId": run_id, "limit": REASON_LOG_LINES})
        reason = keep_awake_reason(page["lines"])
        said[:] = [reason] if reason else []
        return bool(said)

    await poll_until(has_said, "the agent's line in the first page of the run's log")
    return said[0]


async def test_without_logind_the_run_goes_on_with_keep_awake_null_and_its_log_says_why(
    tmp_path: Path,
) -> None:
    jobs = [
        job("lm", "--steps", "4", "--hang-at", "2", kind="train"),
        job("chatty", "--flood", str(FLOOD), kind="train"),
    ]
    root = make_workspace(tmp_path / "ws", jobs)
    client = await start_server(root, init_options={"notify": {"desktop": False}}, env=no_logind(tmp_path))
    try:
        run_id = (await client.call("arena/start", {"id": "lm"}))["runId"]
        reason = await reason_in_first_page(client, run_id)
        assert "system bus" in reason, reason
        active = (await client.call("arena/status", {}))["active"]
        assert active["runId"] == run_id and active["status"] == "running", "the run goes on"
        assert "keepAwake" in active and active["keepAwake"] is None
        assert keep_awake_text(active, reason) == f"the machine may sleep: {reason}"
        lines = await all_logs(client, run_id)
        said = [line for line in lines if line["text"].startswith("the machine cannot be kept awake")]
        assert len(said) == 1 and said[0]["stream"] == "arena", "said once, by the agent"
        shown = await asyncio.to_thread(run_arena, root, "status")
        assert shown.returncode == 0, shown.stderr
        words = " ".join(re.sub("[│┃|]", " ", shown.stdout).split())  # the table may wrap the cell
        assert "the machine may sleep: cannot reach the system bus" in words, shown.stdout
        await client.call("arena/stop", {"runId": run_id, "kill": True, "confirm": True})
        assert (await wait_status(client, run_id, "stopped"))["keepAwake"] is None

        chatty = (await client.call("arena/start", {"id": "chatty"}))["runId"]
        assert (await wait_status(client, chatty, "succeeded"))["keepAwake"] is None
        assert "system bus" in await reason_in_first_page(client, chatty)
    finally:
        await stop_server(client)
