"""The server assembled: its handlers registered and its features plugged in."""

from __future__ import annotations

from arena_ls.health import Hardware
from arena_ls.protocol.feature import LanguageFeature
from arena_ls.protocol.features.actions import CodeActions
from arena_ls.protocol.features.adoption import AdoptionActions
from arena_ls.protocol.features.diagnostics import DiagnosticsFeature
from arena_ls.protocol.features.lenses import CodeLenses
from arena_ls.protocol.server import ArenaServer, register_handlers


def default_features(server: ArenaServer) -> list[LanguageFeature]:
    """The editor features every server has, in the order their hooks are called."""
    return [DiagnosticsFeature(server), CodeLenses(server), CodeActions(server), AdoptionActions(server)]


def create_server(hardware: Hardware | None = None) -> ArenaServer:
    """Build the server with every method, command and feature registered.

    ``hardware`` replaces the real machine probe (tests inject a fake GPU
    and battery this way; the product always uses the real one).
    """
    server = ArenaServer(hardware)
    register_handlers(server)
    for feature in default_features(server):
        server.add_feature(feature)
    return server
