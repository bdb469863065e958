"""Fake HTTP servers of the tests, served from a thread that a shutdown need not wait for.

``serve_forever`` looks for a shutdown every ``poll_interval`` (0.5 s by default), and
``shutdown()`` waits for that look: 0.48 s of every fake server's tear-down was that wait.
"""

from __future__ import annotations

import socketserver
import threading

POLL_S = 0.01
"""How often a served fake looks for a shutdown: its tear-down waits at most this long."""


def serve_in_thread(server: socketserver.BaseServer, name: str = "fake-server") -> threading.Thread:
    """Start ``server.serve_forever`` in a daemon thread; ``server.shutdown()`` returns within ``POLL_S``."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_S}, name=name, daemon=True
    )
    thread.start()
    return thread
