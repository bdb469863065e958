"""Editor features, one module each, each with a ``register(server)`` function.

``register_all`` calls every one and isolates failures, so one broken
feature never takes the server down with it.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arena_ls.protocol.server import ArenaServer

log = logging.getLogger(__name__)

FEATURES = ("diagnostics", "lenses", "actions")


def register_all(server: ArenaServer) -> None:
    for name in FEATURES:
        try:
            module = importlib.import_module(f"arena_ls.protocol.features.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"arena_ls.protocol.features.{name}":
                raise
            continue
        module.register(server)
