"""``arena-ls`` with a feature that raises in every hook, plugged in before the real ones.

A test launcher, not a product mode: it proves that one broken feature never
keeps the others (diagnostics, lenses, quick fixes) or the request from
working. The log also goes to the file named by ``ARENA_TEST_LOG``, so the
test can read the tracebacks the server wrote.
"""

from __future__ import annotations

import logging
import os
import sys

from lsprotocol import types

from arena_ls.protocol.app import default_features
from arena_ls.protocol.feature import Command, LanguageFeature
from arena_ls.protocol.main import _protect_stdout, configure_logging
from arena_ls.protocol.rpc import serving
from arena_ls.protocol.server import ArenaServer, register_handlers
from arena_ls.settings import Settings


class BrokenFeature(LanguageFeature):
    """Every hook raises."""

    def __init__(self, server: ArenaServer) -> None:
        server.configuration.subscribe(self.settings_changed)

    def commands(self) -> dict[str, Command]:
        return {"arena.test.broken": self.broken_command}

    async def broken_command(self, *args: object) -> None:
        raise RuntimeError("broken feature: command")

    def settings_changed(self, settings: Settings) -> None:
        raise RuntimeError("broken feature: settings")

    def document_open(self, params: types.DidOpenTextDocumentParams) -> None:
        raise RuntimeError("broken feature: didOpen")

    def document_change(self, params: types.DidChangeTextDocumentParams) -> None:
        raise RuntimeError("broken feature: didChange")

    def document_save(self, params: types.DidSaveTextDocumentParams) -> None:
        raise RuntimeError("broken feature: didSave")

    def active_changed(self) -> None:
        raise RuntimeError("broken feature: activeChanged")

    async def code_lens(self, params: types.CodeLensParams) -> list[types.CodeLens]:
        raise RuntimeError("broken feature: codeLens")

    def code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        raise RuntimeError("broken feature: codeAction")


def main() -> int:
    configure_logging("INFO")
    logging.getLogger().addHandler(logging.FileHandler(os.environ["ARENA_TEST_LOG"], encoding="utf-8"))
    server = ArenaServer()
    register_handlers(server)
    server.add_feature(BrokenFeature(server))
    for feature in default_features(server):
        server.add_feature(feature)
    return serving.serve_stdio(server, sys.stdin.buffer, _protect_stdout())


if __name__ == "__main__":
    sys.exit(main())
