"""Bad settings through a real arena-ls: one warning per bad key, however often they are read."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types

from tests.helpers.lsp import job, make_workspace, start_server, stop_server, wait_for

BAD_STALL = {"watchdog": {"stallSeconds": -5}}


async def test_settings_sent_twice_warn_once_per_bad_key(tmp_path: Path) -> None:
    """VS Code and Neovim send the same settings as initializationOptions and again when the
    server pulls ``workspace/configuration``: the user must not see each warning twice."""
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    pulled = {**BAD_STALL, "insights": {"enabled": "sometimes"}}  # a second bad key, pulled only
    client = await start_server(root, init_options=BAD_STALL, configuration={"arena": pulled})
    try:
        # Messages arrive in order: once the pulled settings' own warning is here, so is every
        # warning the pull could have caused.
        await wait_for(
            lambda: any("insights.enabled" in m.message for m in client.messages), what="the pull's warning"
        )
        stall = [m.message for m in client.messages if "watchdog.stallSeconds" in m.message]
        assert len(stall) == 1, stall
    finally:
        await stop_server(client)


async def test_a_setting_broken_again_warns_again(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    client = await start_server(root, init_options=BAD_STALL)
    try:
        await wait_for(lambda: client.messages, what="the first warning")
        for settings in ({"watchdog": {"stallSeconds": 30}}, BAD_STALL, {"insights": {"enabled": 3}}):
            client.workspace_did_change_configuration(
                types.DidChangeConfigurationParams(settings={"arena": settings})
            )
        await wait_for(
            lambda: any("insights.enabled" in m.message for m in client.messages), what="the last change"
        )
        stall = [m.message for m in client.messages if "watchdog.stallSeconds" in m.message]
        assert len(stall) == 2, "fixed, then broken again: shown again"
    finally:
        await stop_server(client)
