"""``arena/metrics``'s reader: off the event loop, its own parser, a bounded cache that forgets
the run asked about least recently."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from arena_ls.lifecycle.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.lifecycle.rundir import RunDir, RunSpec, StateFolder
from arena_ls.lifecycle.runlock import RunLock
from arena_ls.lifecycle.runview import RunView
from arena_ls.protocol import metrics
from arena_ls.protocol.metrics import KEEP_CACHES, RunMetrics

WAIT = 30.0


def finished_run(root: Path, job_id: str, lines: list[str]) -> RunView:
    """A run folder on disk whose log holds ``lines`` (what a trainer printed)."""

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
    real = metrics.run_metrics

    def held(view: RunView, cache: Any) -> dict[str, Any]:
        readers.append(threading.current_thread())
        entered.set()
        assert release.wait(WAIT)
        return real(view, cache)

    monkeypatch.setattr(metrics, "run_metrics", held)
    answer = asyncio.create_task(RunMetrics().wire(view))
    assert await asyncio.to_thread(entered.wait, WAIT), "the read began"
    assert not answer.done(), "the read is held, and the loop still runs this test"
    release.set()
    result = await asyncio.wait_for(answer, WAIT)
    assert readers[0] is not threading.main_thread()
    assert [point["step"] for point in result["points"]] == [1, 2]


async def test_the_cache_reads_only_new_records_with_its_own_parser(tmp_path: Path) -> None:
    view = finished_run(tmp_path, "lm", [progress(1), progress(2)])
    reader = RunMetrics()
    first = await reader.wire(view)
    writer = OutputWriter(view.run_dir.path)
    writer.append_line(STDOUT, progress(3))
    writer.close()
    second = await reader.wire(view)
    assert [p["step"] for p in first["points"]] == [1, 2]
    assert [p["step"] for p in second["points"]] == [1, 2, 3], "each point once"
    assert reader.cache(view).parser is not view.parser, "the live follower's parser is left alone"


async def test_past_the_bound_only_the_run_asked_about_least_recently_is_forgotten(tmp_path: Path) -> None:
    reader = RunMetrics()
    views = [finished_run(tmp_path, f"job{i}", [progress(1)]) for i in range(KEEP_CACHES + 1)]
    for view in views[:KEEP_CACHES]:
        await reader.wire(view)
    kept = {view.run_id: reader.cache(view) for view in views[1:KEEP_CACHES]}  # views[0] is now oldest
    await reader.wire(views[KEEP_CACHES])
    for view in views[1:KEEP_CACHES]:
        assert reader.cache(view) is kept[view.run_id], "the others keep what they read"
    assert reader.cache(views[0]).next_record == 0, "the oldest was forgotten and starts over"


async def test_a_step_announced_by_a_plain_line_and_by_arena_is_one_point(tmp_path: Path) -> None:
    """Regression (issue 27 item 1): the reference trainer prints ``step N/600 loss ...`` and then
    ``@arena {"event": "progress", ...}``; each was a point, and ``arena plot`` drew a relaunch
    between the two of every step."""
    lines = []
    for step in (10, 20, 30):
        lines += [f"step {step}/30 loss 9.0000 lr 1.00e-03", progress(step)]
    result = await RunMetrics().wire(finished_run(tmp_path, "lm", lines))
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
    result = await RunMetrics().wire(view)
    assert [r["step"] for r in result["relaunches"]] == [20, 0]
