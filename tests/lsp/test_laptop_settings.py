"""The laptop's settings (contract 8.3) through a real arena-ls: ``power.keepAwake`` and ``notify.*``
reach the run's agent, which keeps the machine awake (a fake logind on the test's own ``dbus-daemon``)
and tells the end to the test's notification server and ``notify.command``; ``RunInfo.keepAwake``
says so. Off, nothing is asked and nothing is told."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from arena_ls.platform_awake import LOGIND_BUS_ENV
from tests.helpers.dbus import DBUS_DAEMON, DBusDaemon, FakeLogind, FakeNotifications
from tests.helpers.lsp import job, make_workspace, start_server, stop_server, wait_status
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.skipif(
    DBUS_DAEMON is None or not sys.platform.startswith("linux"),
    reason="needs dbus-daemon (scripts/test.sh installs it)",
)

RECORDER = "import sys\nopen(sys.argv[1], 'a', encoding='utf-8').write(sys.stdin.read())\n"


async def test_the_settings_reach_the_agent_and_keep_awake_and_the_end_are_told(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("lm", "--steps", "10", "--ckpt-every", "5", kind="train")])
    script, received = tmp_path / "recorder.py", tmp_path / "received.jsonl"
    script.write_text(RECORDER, encoding="utf-8")
    bus = DBusDaemon(tmp_path)
    logind, notifications = FakeLogind(bus.address), FakeNotifications(bus.address)
    env = {LOGIND_BUS_ENV: bus.address, "DBUS_SESSION_BUS_ADDRESS": bus.address}
    options = {"notify": {"command": [sys.executable, str(script), str(received)]}}
    client = await start_server(root, init_options=options, env=env)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        ended = await wait_status(client, run["runId"], "succeeded")
        assert ended["keepAwake"] is True
        # Told as it changed, not only at the next status (contract 8.3's keepAwake in statusChanged).
        assert any(s["runId"] == run["runId"] and s.get("keepAwake") is True for s in client.statuses)
        [inhibition] = logind.wait_for_inhibitions(1)
        assert inhibition.released.wait(30)
        [told] = wait_until(notifications.received, "the desktop notification")
        assert told["summary"] == "Job lm: succeeded"
        event = wait_until(
            lambda: received.exists() and received.read_text(encoding="utf-8"), "the command's event"
        )
        payload = json.loads(event)
        assert (payload["event"], payload["runId"], payload["step"]) == ("ended", run["runId"], 10)
    finally:
        await stop_server(client)
        logind.close()
        notifications.close()
        bus.close()


async def test_off_nothing_is_asked_and_nothing_is_told(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("lm", "--steps", "3", kind="train")])
    bus = DBusDaemon(tmp_path)
    logind, notifications = FakeLogind(bus.address), FakeNotifications(bus.address)
    env = {LOGIND_BUS_ENV: bus.address, "DBUS_SESSION_BUS_ADDRESS": bus.address}
    options = {"power": {"keepAwake": False}, "notify": {"desktop": False}}
    client = await start_server(root, init_options=options, env=env)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        ended = await wait_status(client, run["runId"], "succeeded")
        assert ended["keepAwake"] is False
        assert logind.inhibitions == [] and notifications.received() == []
    finally:
        await stop_server(client)
        logind.close()
        notifications.close()
        bus.close()
