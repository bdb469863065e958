"""The client's settings, and the subscribers that hear when they change.

Settings reach whoever needs them by subscription: a feature or the
workspace subscribes once and is called with the new ``Settings`` after
every change (``initializationOptions``, ``workspace/didChangeConfiguration``
or a ``workspace/configuration`` pull). One subscriber that fails is logged
with its traceback and never keeps the others from hearing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from arena_ls.settings import Settings

log = logging.getLogger(__name__)

Subscriber = Callable[[Settings], None]


class Configuration:
    """The settings in force for this client, and who listens for changes."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.base = Settings()
        """The settings from ``initializationOptions``: what later changes apply on top of."""
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call ``subscriber`` after every change; returns the function that unsubscribes it."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def update(self, settings: Settings) -> None:
        self.settings = settings
        for subscriber in list(self._subscribers):
            try:
                subscriber(settings)
            except Exception:
                log.exception("a settings subscriber (%r) failed", subscriber)

    def reset(self) -> None:
        """A new client: the defaults again (subscribers stay)."""
        self.settings = self.base = Settings()
