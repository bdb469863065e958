"""``protocol/warmup.py``: what the first status waited for is done on worker threads (issue 38 item 7).

The imports of the workspace's modules and the first structuring of what an editor sends run off
the event loop's thread, after the ``initialize`` handler's callback; the returned future says
when the imports are done, even when they fail or the executor is gone. Start-up's own work
(``FirstStatus.then``) begins after the first status's answer is sent, or after a short wait for a
client that never asks.
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


async def _answered_by_a_handler(first_status: warmup.FirstStatus, order: list[str]) -> None:
    """A request handler that marks the first status answered, its answer sent by a done callback
    of its task, as pygls sends it."""

    async def handler() -> str:
        first_status.answered()
        return "answer"

    task = asyncio.ensure_future(handler())
    task.add_done_callback(lambda _: order.append("answer sent"))
    await task


async def test_start_up_work_begins_after_the_first_status_is_sent() -> None:
    first_status = warmup.FirstStatus()
    order: list[str] = []

    async def work() -> None:
        order.append("start-up work")

    waiting = asyncio.ensure_future(first_status.then(work))
    await asyncio.sleep(0)
    assert order == [], "nothing begins before the first status"
    await _answered_by_a_handler(first_status, order)
    await asyncio.wait_for(waiting, WAIT)

    assert order == ["answer sent", "start-up work"]


async def test_a_client_that_never_asks_gets_the_start_up_work_after_the_wait(monkeypatch: Any) -> None:
    monkeypatch.setattr(warmup, "AFTER_FIRST_STATUS_WAIT", 0.01)
    done = asyncio.Event()

    async def work() -> None:
        done.set()

    await asyncio.wait_for(warmup.FirstStatus().then(work), WAIT)
    assert done.is_set()


async def test_later_statuses_change_nothing() -> None:
    first_status = warmup.FirstStatus()
    runs: list[str] = []

    async def work() -> None:
        runs.append("work")

    await _answered_by_a_handler(first_status, [])
    await _answered_by_a_handler(first_status, [])
    await asyncio.wait_for(first_status.then(work), WAIT)  # answered already: at once
    assert runs == ["work"]
