"""``run_task``: background work is kept until done, and its failure is logged with its traceback."""

from __future__ import annotations

import asyncio
import gc
import logging
import weakref

import pytest

from arena_ls.protocol.tasks import TaskRunner


async def wait_forever() -> None:
    """Awaits a future only the task itself holds: a task nobody keeps is collected."""
    await asyncio.get_running_loop().create_future()


async def fail() -> None:
    raise ValueError("the background work broke")


async def test_a_failing_task_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    runner = TaskRunner()
    with caplog.at_level(logging.ERROR, logger="arena_ls.protocol.tasks"):
        task = runner.run_task(fail(), "the failing one")
        await asyncio.wait([task])
        await asyncio.sleep(0)  # done callbacks run on the next turn of the loop
    (record,) = [r for r in caplog.records if r.name == "arena_ls.protocol.tasks"]
    assert "the failing one" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)
    assert "ValueError: the background work broke" in caplog.text
    assert "Traceback" in caplog.text
    assert runner.tasks == set()


async def test_a_task_is_kept_until_done_not_garbage_collected() -> None:
    runner = TaskRunner()
    ref = weakref.ref(runner.run_task(wait_forever(), "kept"))
    await asyncio.sleep(0)  # the task starts and waits on its own future
    gc.collect()
    task = ref()
    assert task is not None and not task.done(), "the runner let the task be collected"
    assert task in runner.tasks
    task.cancel()
    await asyncio.wait([task])
    await asyncio.sleep(0)
    assert runner.tasks == set(), "a finished task is released"


async def test_the_collection_check_can_fail_a_task_nobody_keeps_is_collected() -> None:
    """The control for the test above: without a reference the same task is collected."""
    ref = weakref.ref(asyncio.get_running_loop().create_task(wait_forever()))
    await asyncio.sleep(0)
    gc.collect()
    assert ref() is None
