"""The feature registry and the settings subscription: every hook reaches every feature, isolated."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from lsprotocol import types

from arena_ls.protocol.app import create_server
from arena_ls.protocol.configuration import Configuration
from arena_ls.protocol.feature import FeatureRegistry, LanguageFeature
from arena_ls.protocol.features.actions import CodeActions
from arena_ls.protocol.features.diagnostics import DiagnosticsFeature
from arena_ls.protocol.features.lenses import CodeLenses
from arena_ls.settings import Settings

LENS = types.CodeLens(range=types.Range(types.Position(0, 0), types.Position(0, 0)))
PARAMS = types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri="file:///m.json"))
ACTION = types.CodeAction(title="fix it")
ACTION_PARAMS = types.CodeActionParams(
    text_document=types.TextDocumentIdentifier(uri="file:///m.json"),
    range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
    context=types.CodeActionContext(diagnostics=[]),
)


class Broken(LanguageFeature):
    def active_changed(self) -> None:
        raise RuntimeError("broken: active")

    async def code_lens(self, params: types.CodeLensParams) -> list[types.CodeLens]:
        raise RuntimeError("broken: lens")

    def code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        raise RuntimeError("broken: action")


class Working(LanguageFeature):
    def __init__(self) -> None:
        self.calls = 0

    def active_changed(self) -> None:
        self.calls += 1

    async def code_lens(self, params: types.CodeLensParams) -> list[types.CodeLens]:
        return [LENS]

    def code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        return [ACTION]


def registry(*features: LanguageFeature) -> FeatureRegistry:
    found = FeatureRegistry()
    for feature in features:
        found.add(feature)
    return found


def test_a_notification_reaches_every_feature_past_one_that_raises(caplog: pytest.LogCaptureFixture) -> None:
    working = Working()
    features = registry(Broken(), working)
    with caplog.at_level(logging.ERROR, logger="arena_ls.protocol.feature"):
        features.notify("active_changed", lambda f: f.active_changed())
    assert working.calls == 1
    (record,) = caplog.records
    assert record.getMessage() == "feature Broken failed in active_changed"
    assert record.exc_info is not None and str(record.exc_info[1]) == "broken: active"


def test_a_request_gathers_every_answer_but_the_broken_one(caplog: pytest.LogCaptureFixture) -> None:
    features = registry(Broken(), Working())
    with caplog.at_level(logging.ERROR, logger="arena_ls.protocol.feature"):
        assert features.gather("code_action", lambda f: f.code_action(ACTION_PARAMS)) == [ACTION]
    assert "feature Broken failed in code_action" in caplog.text
    assert "RuntimeError: broken: action" in caplog.text


async def test_an_awaited_request_gathers_every_answer_but_the_broken_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    features = registry(Broken(), Working())
    with caplog.at_level(logging.ERROR, logger="arena_ls.protocol.feature"):
        assert await features.gather_async("code_lens", lambda f: f.code_lens(PARAMS)) == [LENS]
    assert "feature Broken failed in code_lens" in caplog.text
    assert "RuntimeError: broken: lens" in caplog.text


async def test_a_hook_a_feature_does_not_override_does_nothing() -> None:
    assert await registry(LanguageFeature()).gather_async("code_lens", lambda f: f.code_lens(PARAMS)) == []
    assert registry(LanguageFeature()).gather("code_action", lambda f: f.code_action(ACTION_PARAMS)) == []


def test_features_are_found_by_type_and_added_once() -> None:
    working = Working()
    features = registry(working)
    assert features.get(Working) is working
    assert features.get(Broken) is None
    with pytest.raises(ValueError, match="already registered"):
        features.add(Working())


def test_settings_reach_subscribers_past_one_that_raises(caplog: pytest.LogCaptureFixture) -> None:
    configuration = Configuration()
    heard: list[Settings] = []

    def broken(settings: Settings) -> None:
        raise RuntimeError("broken subscriber")

    configuration.subscribe(broken)
    unsubscribe = configuration.subscribe(heard.append)
    changed = Settings(state_dir="elsewhere")
    with caplog.at_level(logging.ERROR, logger="arena_ls.protocol.configuration"):
        configuration.update(changed)
    assert heard == [changed] and configuration.settings is changed
    assert "RuntimeError: broken subscriber" in caplog.text
    unsubscribe()
    configuration.update(Settings())
    assert heard == [changed], "an unsubscribed listener hears nothing more"


def test_the_server_holds_its_features_by_type_and_registers_their_commands() -> None:
    server = create_server()
    for kind in (DiagnosticsFeature, CodeLenses, CodeActions):
        feature = server.get_feature(kind)
        assert isinstance(feature, kind)
    assert server.get_feature(Broken) is None
    assert "arena.showBlocked" in server.protocol.fm.commands
    with pytest.raises(ValueError, match="already registered"):
        server.add_feature(CodeActions(server))


async def test_a_client_that_leaves_leaves_no_pending_publish_and_no_workspace(tmp_path: Path) -> None:
    """A TCP client that drops within the debounce of a keystroke: its publish must not run later
    and open the workspace again for nobody, nor its documents be republished to the next client."""
    server = create_server()
    server.root = tmp_path
    diagnostics = server.features.get(DiagnosticsFeature)
    assert diagnostics is not None
    diagnostics.published.add("file:///old-client/train.py")
    diagnostics.schedule("file:///old-client/train.py", delay=3600.0)
    await server.end_session()
    assert diagnostics.timers == {} and diagnostics.published == set()
    assert not server.has_workspace
