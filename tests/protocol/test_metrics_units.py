"""``arena/metrics``'s reader: off the event loop, paged (contract 7.2), every event once."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from arena_ls.lifecycle.runview import RunView
from arena_ls.protocol import metrics_request
from arena_ls.protocol.metrics_request import DEFAULT_LIMIT, MetricsCursor, metrics_page
from arena_ls.run.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunSpec, RunState
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

WAIT = 30.0


def finished_run(root: Path, job_id: str, lines: list[str]) -> RunView:
    """An ended run's folder on disk whose log holds ``lines`` (what a trainer printed)."""
    view = live_run(root, job_id, lines)
    view.run_dir.write_state(RunState(run_id=view.run_id, job_id=job_id, status=RunStatus.SUCCEEDED))
    return view


def live_run(root: Path, job_id: str, lines: list[str]) -> RunView:
    """A run folder on disk whose log holds ``lines``, its trainer still going (no final state)."""

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id=job_id, job_name=job_id, kind="train", argv=["x"], cwd=".")

    folder = StateFolder(root / "state")
    lock = RunLock(folder)
    run: RunDir = lock.claim(job_id, build)
    writer = OutputWriter(run.path)
    for line in lines:
        writer.append_line(STDOUT, line)
    writer.close()
    lock.release(run.run_id)
    return RunView(run, run.read_spec())


def progress(step: int) -> str:
    return f'@arena {{"event": "progress", "step": {step}, "loss": {1.0 / step}}}'


async def test_the_log_is_read_on_a_worker_thread_while_the_loop_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = finished_run(tmp_path, "lm", [progress(1), progress(2)])
    entered, release = threading.Event(), threading.Event()
    readers: list[threading.Thread] = []
    real = metrics_request.read_page

    def held(*args: Any) -> dict[str, Any]:
        readers.append(threading.current_thread())
        entered.set()
        assert release.wait(WAIT)
        return real(*args)

    monkeypatch.setattr(metrics_request, "read_page", held)
    answer = asyncio.create_task(metrics_page(view, None, DEFAULT_LIMIT))
    assert await asyncio.to_thread(entered.wait, WAIT), "the read began"
    assert not answer.done(), "the read is held, and the loop still runs this test"
    release.set()
    result = await asyncio.wait_for(answer, WAIT)
    assert readers[0] is not threading.main_thread()
    assert [point["step"] for point in result["points"]] == [1, 2]
    assert result["next"] is None, "an ended run read to its end has no next page"


def checkpoint(step: int) -> str:
    return f'@arena {{"event": "checkpoint", "step": {step}, "path": "ckpt/{step}.pt"}}'


async def walk(view: RunView, limit: int) -> list[dict[str, Any]]:
    pages = []
    cursor = None
    while True:
        page = await metrics_page(view, cursor, limit)
        pages.append(page)
        if page["next"] is None:
            return pages
        cursor = MetricsCursor.decode(page["next"])


async def test_pages_hold_at_most_limit_of_each_and_walk_every_event_once(tmp_path: Path) -> None:
    lines = []
    for step in range(1, 1001):
        lines.append(checkpoint(step))
        if step % 10 == 0:
            lines.append(progress(step))
    view = finished_run(tmp_path, "lm", lines)
    pages = await walk(view, 64)
    steps = [c["step"] for page in pages for c in page["checkpoints"]]
    points = [p["step"] for page in pages for p in page["points"]]
    assert steps == list(range(1, 1001)), "every checkpoint once, in order"
    assert points == list(range(10, 1001, 10))
    assert all(len(page["checkpoints"]) <= 64 and len(page["points"]) <= 64 for page in pages)
    assert len(pages) == 16, "1,000 checkpoints in pages of 64"


async def test_a_live_run_always_has_a_next_page_that_carries_what_came_since(tmp_path: Path) -> None:
    view = live_run(tmp_path, "lm", [progress(1), progress(2)])
    first = await metrics_page(view, None, DEFAULT_LIMIT)
    assert [p["step"] for p in first["points"]] == [1, 2] and first["next"] is not None
    writer = OutputWriter(view.run_dir.path)
    writer.append_line(STDOUT, progress(3))
    writer.close()
    second = await metrics_page(view, MetricsCursor.decode(first["next"]), DEFAULT_LIMIT)
    assert [p["step"] for p in second["points"]] == [3], "each point once"


async def test_a_step_announced_by_a_plain_line_and_by_arena_is_one_point(tmp_path: Path) -> None:
    """Regression (issue 27 item 1): the reference trainer prints ``step N/600 loss ...`` and then
    ``@arena {"event": "progress", ...}``; each was a point, and ``arena plot`` drew a relaunch
    between the two of every step."""
    lines = []
    for step in (10, 20, 30):
        lines += [f"step {step}/30 loss 9.0000 lr 1.00e-03", progress(step)]
    result = await metrics_page(finished_run(tmp_path, "lm", lines), None, DEFAULT_LIMIT)
    assert [(p["step"], p["loss"]) for p in result["points"]] == [(10, 0.1), (20, 0.05), (30, 1.0 / 30)]
    assert result["relaunches"] == []


async def test_the_agents_relaunch_lines_are_the_runs_relaunches(tmp_path: Path) -> None:
    view = finished_run(tmp_path, "lm", [progress(s) for s in (10, 20, 30)])
    writer = OutputWriter(view.run_dir.path)
    writer.append_line(ARENA, "TRAINING_CRASHED: lm code -9")
    writer.append_line(ARENA, "restarting from step 20 (attempt 1/3) in 5s")
    writer.append_line(STDOUT, progress(30))
    writer.append_line(ARENA, "restarting from scratch (no checkpoint yet) (attempt 2/3) in 10s")
    writer.append_line(STDOUT, "restarting from step 99 is only the trainer talking")
    writer.close()
    result = await metrics_page(view, None, DEFAULT_LIMIT)
    assert [r["step"] for r in result["relaunches"]] == [20, 0]


@pytest.mark.parametrize("text", ["", "m1", "m1.1.2", "m1.-1.0.0", "m1.1.1.2", "x" * 40, "m1.1.1.1 "])
def test_a_cursor_not_made_by_arena_metrics_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a cursor"):
        MetricsCursor.decode(text)
