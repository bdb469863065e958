"""A value computed once per test session, however many ``pytest -n`` workers ask for it.

Each xdist worker is its own process, so a module-level cache computes a costly value once per
worker: the uninterrupted reference run of each framework (``tests/frameworks``, 10-20 s of a
real trainer) ran in every worker that drew one of its tests. Here the first worker to ask
computes it under a lock in the session's shared temporary folder and writes it as JSON; the
others wait for the lock and read it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest

if sys.platform != "win32":
    import fcntl


def session_once(tmp_path_factory: pytest.TempPathFactory, key: str, compute: Callable[[], Any]) -> Any:
    """``compute()`` (a JSON value), computed by the first worker of the session that asks for ``key``."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the folder every worker's own basetemp is made in
    target = root / f"session-once-{key}.json"
    with open(root / f"session-once-{key}.lock", "a") as lock:
        if sys.platform != "win32":
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if target.exists():
            return json.loads(target.read_text(encoding="utf-8"))
        value = compute()
        written = target.with_suffix(".part")
        written.write_text(json.dumps(value), encoding="utf-8")
        written.replace(target)
        return value
