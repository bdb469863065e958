"""Editor features as plug-ins of the server.

A feature subclasses ``LanguageFeature`` and overrides the hooks it needs;
the server holds them in one ``FeatureRegistry`` (``add_feature`` /
``get_feature`` by type). Each LSP notification has one handler in the
server, which calls the hook of every feature in turn; a request a feature
can answer (code lenses, code actions) gathers every feature's answer. A
feature that raises is logged on stderr with its traceback and skipped:
the other features, and the request, still work.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from lsprotocol import types

log = logging.getLogger(__name__)

Command = Callable[..., Awaitable[Any]]
"""A command's handler, called with the command's arguments."""

F = TypeVar("F", bound="LanguageFeature")
T = TypeVar("T")


class LanguageFeature:
    """One editor feature. Every hook does nothing unless a feature overrides it."""

    def commands(self) -> dict[str, Command]:
        """The ``workspace/executeCommand`` commands this feature answers (registered once)."""
        return {}

    def document_open(self, params: types.DidOpenTextDocumentParams) -> None:
        """``textDocument/didOpen``."""

    def document_change(self, params: types.DidChangeTextDocumentParams) -> None:
        """``textDocument/didChange``."""

    def document_save(self, params: types.DidSaveTextDocumentParams) -> None:
        """``textDocument/didSave``."""

    def document_close(self, params: types.DidCloseTextDocumentParams) -> None:
        """``textDocument/didClose``."""

    def active_changed(self) -> None:
        """A job's runnability or the workspace's active run may have changed."""

    def live_trainers_changed(self) -> None:
        """A run of some trainer started or ended (AR013 follows which trainers are live)."""

    async def code_lens(self, params: types.CodeLensParams) -> list[types.CodeLens]:
        """``textDocument/codeLens``: this feature's lenses (awaited: they may need a worker thread)."""
        return []

    def code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        """``textDocument/codeAction``: this feature's actions."""
        return []

    def shutdown(self) -> None:
        """The client is leaving: drop pending work (runs go on)."""


class FeatureRegistry:
    """The server's features, one per type, called in the order they were added."""

    def __init__(self) -> None:
        self._features: dict[type[LanguageFeature], LanguageFeature] = {}

    def add(self, feature: LanguageFeature) -> None:
        kind = type(feature)
        if kind in self._features:
            raise ValueError(f"a {kind.__name__} is already registered")
        self._features[kind] = feature

    def get(self, kind: type[F]) -> F | None:
        feature = self._features.get(kind)
        return feature if isinstance(feature, kind) else None

    def __iter__(self) -> Iterator[LanguageFeature]:
        return iter(list(self._features.values()))

    def notify(self, hook: str, call: Callable[[LanguageFeature], object]) -> None:
        """``call(feature)`` for every feature; one that raises is logged and the rest go on."""
        for feature in self:
            try:
                call(feature)
            except Exception:
                log.exception("feature %s failed in %s", type(feature).__name__, hook)

    def gather(self, hook: str, call: Callable[[LanguageFeature], list[T]]) -> list[T]:
        """Every feature's answer to a request, in order; one that raises contributes nothing."""
        answers: list[T] = []
        for feature in self:
            try:
                answers.extend(call(feature))
            except Exception:
                log.exception("feature %s failed in %s", type(feature).__name__, hook)
        return answers

    async def gather_async(self, hook: str, call: Callable[[LanguageFeature], Awaitable[list[T]]]) -> list[T]:
        """``gather`` for a hook that is a coroutine."""
        answers: list[T] = []
        for feature in self:
            try:
                answers.extend(await call(feature))
            except Exception:
                log.exception("feature %s failed in %s", type(feature).__name__, hook)
        return answers
