"""``protocol/warmup.py``: what the first status waited for is done on worker threads (issue 38 item 7).

The imports of the workspace's modules and the first structuring of what an editor sends run off
the event loop's thread, after the ``initialize`` handler's callback; the returned future says
when the imports are done, even when they fail or the executor is gone.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from arena_ls.protocol import warmup
from tests.helpers.lsp import WAIT


class FakeProtocol:
    def __init__(self) -> None:
        self.threads: list[int] = []
        self.structured = threading.Event()

    def warm_structuring(self) -> None:
        self.threads.append(threading.get_ident())
        self.structured.set()


async def test_the_imports_and_the_structuring_run_on_worker_threads(monkeypatch: Any) -> None:
    imported: list[tuple[str, int]] = []
    monkeypatch.setattr(
        warmup.importlib, "import_module", lambda name: imported.append((name, threading.get_ident()))
    )
    protocol = FakeProtocol()
    loop_thread = threading.get_ident()
    done = warmup.warm_up(protocol)
    assert imported == [] and not done.done(), "nothing runs inside the initialize handler's callback"
    await asyncio.wait_for(done, WAIT)
    assert [name for name, _ in imported] == list(warmup.WORKSPACE_MODULES)
    assert all(thread != loop_thread for _, thread in imported)
    assert await asyncio.to_thread(protocol.structured.wait, WAIT)
    assert protocol.threads and protocol.threads[0] != loop_thread


async def test_a_failed_import_is_logged_and_the_future_still_ends(
    monkeypatch: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(name: str) -> None:
        raise ImportError(f"no {name}")

    monkeypatch.setattr(warmup.importlib, "import_module", broken)
    await asyncio.wait_for(warmup.warm_up(FakeProtocol()), WAIT)
    assert "importing arena_ls.gates.budget failed" in caplog.text


async def test_with_the_executor_gone_the_future_ends_at_once() -> None:
    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(1)
    executor.shutdown()
    loop.set_default_executor(executor)
    await asyncio.wait_for(warmup.warm_up(FakeProtocol()), WAIT)
