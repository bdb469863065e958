"""Waiting for a condition from synchronous test code (threads, subprocesses, files).

The wait ends at the condition; the deadline only bounds a broken test, so it
is generous and no test asserts on how long anything took. Async tests use
``tests.helpers.lsp.wait_for``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 60.0


def wait_until(condition: Callable[[], T], what: str, timeout: float = DEADLINE_S, pause: float = 0.02) -> T:
    """Poll ``condition`` until it returns something truthy and return it, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(pause)
