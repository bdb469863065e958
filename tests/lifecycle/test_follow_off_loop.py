"""A flood's lines are read off the event loop (issue 24): the follower's rounds read and scan
on a worker thread, and a status request or a flush during a flood reads no lines on the loop.

Real run folders written as an agent writes them, a real ``RunFollower`` task; no process started.
Behaviour only (which thread read, what was told in which order), never a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.lifecycle.follower import UNWOKEN_POLL_MOST, WATCHED_POLL, RunFollower, woken_or_timed_out
from arena_ls.lifecycle.runview import LineBatch, RunView
from arena_ls.run.capture import LogLine
from arena_ls.run.outputlog import STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.helpers.fake_backend import write_state
from tests.helpers.lsp import wait_for

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")


class Told:
    """A listener that keeps, in order, every line and status change it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def run_changed(self, view: RunView) -> None:
        self.events.append(("status", view.status.value))

    def run_lines(self, view: RunView, lines: list[LogLine]) -> None:
        self.events.extend(("line", line.text) for line in lines)

    def lifecycle(self, view: RunView, text: str) -> None: ...

    def warning(self, text: str) -> None: ...

    def lines(self) -> list[str]:
        return [text for kind, text in self.events if kind == "line"]


class Runs:
    """``FollowedRuns`` of one view (the supervisor's part, minimal)."""

    def __init__(self, folder: StateFolder, view: RunView) -> None:
        self.views = {view.run_id: view}
        self._folder = folder

    @property
    def folder(self) -> StateFolder:
        return self._folder

    def scan(self, *, list_folder: bool = True) -> None: ...

    def list_history(self) -> None: ...

    def retry_damaged(self, view: RunView) -> None: ...

    def check_lost(self, view: RunView) -> bool:
        return view.check_lost(self.folder)

    def report_damage(self, view: RunView) -> None: ...

    def idle(self) -> None: ...

    def busy(self) -> None: ...


class Reads:
    """Which threads ran ``read_batch`` of a view (the loop's thread is the test's)."""

    def __init__(self, view: RunView, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: list[int] = []
        original = view.read_batch

        def recorded(*, records: bool = False) -> LineBatch:
            self.threads.append(threading.get_ident())
            return original(records=records)

        monkeypatch.setattr(view, "read_batch", recorded)

    def on_the_loop(self) -> int:
        return self.threads.count(threading.main_thread().ident or 0)


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    folder = StateFolder(tmp_path / ".aide" / "training")

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="job", job_name="Job", kind="task", argv=["x"], cwd=".")

    run = RunLock(folder).claim("job", build)
    me = os.getpid()  # a live agent (this process): no liveness check finds the run lost
    write_state(run, status=RunStatus.RUNNING, agent_pid=me, agent_create_time=platform.process_identity(me))
    return run


@pytest.fixture
async def following(run: RunDir) -> Any:
    told = Told()
    view = RunView(run, run.read_spec())
    follower = RunFollower(Runs(StateFolder(run.path.parents[1]), view), told)
    yield follower, view, told
    await follower.close()


class Flood:
    """A writer thread appending numbered lines as fast as it can, as a flooding trainer's agent."""

    def __init__(self, writer: OutputWriter) -> None:
        self.writer = writer
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        number = 0
        while not self.stop.is_set():
            block = "".join(f"flood {number + i}\n" for i in range(500))
            self.writer.append(STDOUT, block.encode())
            number += 500
            self.stop.wait(0.002)

    def end(self) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def flood(run: RunDir) -> Iterator[Flood]:
    flood = Flood(OutputWriter(run.path))
    flood.thread.start()
    try:
        yield flood
    finally:
        flood.end()
        flood.writer.close()


async def test_a_round_reads_the_lines_on_a_worker_thread(
    following: Any, run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower, view, told = following
    follower.poll_once()  # the run is known to be running (a status change is read on the loop)
    reads = Reads(view, monkeypatch)
    writer = OutputWriter(run.path)
    writer.append(STDOUT, "".join(f"line {i}\n" for i in range(300)).encode())
    writer.close()
    follower.ensure_running()
    await wait_for(lambda: len(told.lines()) >= 300, what="the 300 lines")
    assert told.lines() == [f"line {i}" for i in range(300)], "each line once, in order"
    assert reads.threads and reads.on_the_loop() == 0, "every read of a round on a worker thread"


async def test_a_status_during_a_flood_reads_no_lines_on_the_loop_but_the_state(
    following: Any, run: RunDir, flood: Flood, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower, view, told = following
    follower.ensure_running()
    await wait_for(lambda: follower.flooding, what="the follower to see the flood")
    reads = Reads(view, monkeypatch)
    write_state(run, step=7)  # the agent's progress write: the status request must see it
    follower.poll_unless_recent(0.0)  # what arena/status and an arena/log flush call
    assert reads.on_the_loop() == 0, "a flood's lines are left to the follower's rounds"
    assert view.state is not None and view.state.step == 7
    assert told.events[-1] == ("status", "running"), "the new state was told at once"
    await wait_for(lambda: reads.threads, what="the next round")
    assert reads.on_the_loop() == 0


async def test_a_status_change_during_a_flood_is_told_after_the_lines_before_it(
    following: Any, run: RunDir, flood: Flood
) -> None:
    follower, view, told = following
    follower.ensure_running()
    await wait_for(lambda: follower.flooding, what="the follower to see the flood")
    flood.end()  # no await from here on: the follower's next round cannot run in between
    flood.writer.append(STDOUT, b"the last line\n")
    write_state(run, status=RunStatus.SUCCEEDED, exit_code=0)
    follower.poll_unless_recent(0.0)
    assert view.status is RunStatus.SUCCEEDED
    assert ("status", "succeeded") in told.events, "the end is told at once"
    ended = told.events.index(("status", "succeeded"))
    assert ("line", "the last line") in told.events[:ended], "the lines before the end come first"


async def test_a_floods_records_are_decoded_on_the_worker_and_handed_out_on_the_loop(
    following: Any, run: RunDir, flood: Flood, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a flood's records (its announcements, progress) costs the loop nothing but handing
    the items out; a checkpoint announced in the flood reaches the view."""
    follower, view, _told = following
    follower.ensure_running()
    await wait_for(lambda: follower.flooding, what="the follower to see the flood")
    decoded: list[int] = []
    handed: list[int] = []
    decode, take = view.records._decode, view.take

    def recorded_decode(*args: Any, **kwargs: Any) -> Any:
        decoded.append(threading.get_ident())
        return decode(*args, **kwargs)

    def recorded_take(item: Any) -> None:
        handed.append(threading.get_ident())
        take(item)

    monkeypatch.setattr(view.records, "_decode", recorded_decode)
    monkeypatch.setattr(view, "take", recorded_take)
    view.records.subscribers = [view]  # the view's own subscription, now through the recorder
    checkpoint = "@arena " + json.dumps({"event": "checkpoint", "step": 40, "path": "ckpt/40.pt"})
    flood.writer.append(STDOUT, f"{checkpoint}\n".encode())
    await wait_for(lambda: view.seen_checkpoint is not None, what="the checkpoint announced in the flood")
    assert view.seen_checkpoint is not None and view.seen_checkpoint.step == 40
    loop = threading.main_thread().ident
    assert decoded and loop not in decoded, "every record decoded on the worker thread"
    assert handed and set(handed) == {loop}, "every item handed out on the loop"


async def test_a_cancellation_that_comes_as_the_follower_is_woken_ends_its_wait() -> None:
    """``asyncio.run`` ends a server whose client left by cancelling the follower's task once; that
    cancellation, coming as a wake-up is set (an agent replaced a state), must not be lost, as
    ``wait_for(event.wait(), timeout)`` loses it on Python 3.10 and 3.11 (a server waited for ever)."""
    wake = asyncio.Event()
    waiting = asyncio.ensure_future(woken_or_timed_out(wake, 60.0))
    await wait_for(lambda: not wake.is_set() and len(wake._waiters) == 1, what="the follower waiting")
    wake.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_the_followers_wait_ends_at_a_wake_or_its_timeout() -> None:
    wake = asyncio.Event()
    await woken_or_timed_out(wake, 0.01)  # nobody wakes it: the timeout ends it
    await wait_for(lambda: not wake._waiters, what="the timed-out waiter gone from the event")
    wake.set()
    await woken_or_timed_out(wake, 60.0)  # already woken: at once
    assert not wake._waiters


class Trickle:
    """A writer thread appending one line every ``pause`` seconds, as a trainer printing its steps."""

    def __init__(self, writer: OutputWriter, lines: int, pause: float) -> None:
        self.writer, self.lines, self.pause = writer, lines, pause
        self.thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        for number in range(self.lines):
            self.writer.append(STDOUT, f"step {number}\n".encode())
            time.sleep(self.pause)  # the trainer's own pace, not a wait for an event


async def rounds_for_a_trickle(follower: RunFollower, run: RunDir, told: Told) -> tuple[int, float]:
    """The follower's rounds while a trainer prints 20 lines, 50 ms apart, and how long it took;
    every line told once, in order."""
    rounds: list[float] = []
    poll_once = follower.poll_once

    def counted(*args: Any, **kwargs: Any) -> bool:
        rounds.append(time.monotonic())
        return bool(poll_once(*args, **kwargs))

    follower.poll_once = counted  # type: ignore[method-assign]
    writer = OutputWriter(run.path)
    trickle = Trickle(writer, lines=20, pause=0.05)
    started = time.monotonic()
    follower.ensure_running()
    trickle.thread.start()
    try:
        await wait_for(lambda: len(told.lines()) >= 20, what="the 20 lines")
    finally:
        trickle.thread.join()
        writer.close()
    took = time.monotonic() - started
    assert told.lines() == [f"step {i}" for i in range(20)], "each line once, in order"
    return len(rounds), took


@linux_only
async def test_a_trickles_lines_wake_the_rounds_instead_of_a_round_every_5_ms(
    following: Any, run: RunDir
) -> None:
    """Where every run is watched, a trainer printing a line every 50 ms costs a round or two per
    line and the watched pace's rounds between, not a round every 5 ms (140 of them here before).
    The bound is on the count of rounds for the time it took, so a loaded machine cannot fail it."""
    follower, _view, told = following
    follower.poll_once()  # the run is known and its folder watched
    rounds, took = await rounds_for_a_trickle(follower, run, told)
    assert follower._state_watch.sees_every_run
    at_most = 2 * 20 + took / WATCHED_POLL + 3  # a wake per write (and one after it), the watched pace
    assert rounds <= at_most, f"{rounds} rounds in {took:.2f} s for 20 lines"


async def test_where_no_write_wakes_the_rounds_a_trickle_is_polled_at_a_pace_that_backs_off(
    following: Any, run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows and macOS: no inotify. The lines of a trainer printing every 50 ms are all told,
    in order, with rounds 5, 10, 20, 40 ms after the last that found a line (about four per line),
    not one every 5 ms."""
    follower, _view, told = following
    monkeypatch.setattr(platform, "open_folder_events", lambda: None)  # as on Windows and macOS
    follower.poll_once()
    rounds, took = await rounds_for_a_trickle(follower, run, told)
    assert not follower._state_watch.sees_every_run
    at_most = 4 * 20 + took / UNWOKEN_POLL_MOST + 3
    assert rounds <= at_most, f"{rounds} rounds in {took:.2f} s for 20 lines"
