"""The follower is woken when an agent replaces an unfinished run's ``state.json`` or appends to its
output (``StateWatch``), and then reads at the quiet pace between the writes.

Real inotify on real folders (Linux; the platform without it is faked); no process. Every wait for
an event is ``select`` with a deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from arena_ls import platform
from arena_ls.lifecycle import state_watch
from arena_ls.lifecycle.follower import (
    FAST_POLL,
    FLOOD_LINES,
    FLOOD_POLL,
    QUIET_POLL,
    SLOW_POLL,
    UNWOKEN_POLL_MOST,
    WATCHED_POLL,
    RunFollower,
)
from arena_ls.lifecycle.state_watch import StateWatch

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux")
DEADLINE = 10.0


def replace_state(folder: Path, text: str = "{}") -> None:
    """As an agent writes its state: a temporary file renamed over ``state.json``."""
    temporary = folder / ".state.json.x.tmp"
    temporary.write_text(text)
    os.replace(temporary, folder / "state.json")


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], DEADLINE)[0])


def test_event_names_are_read_from_inotifys_records() -> None:
    def record(name: bytes, padded: int) -> bytes:
        return struct.pack("iIII", 1, platform.IN_MOVED_TO, 0, padded) + name.ljust(padded, b"\0")

    data = record(b"state.json", 16) + record(b"", 0) + record(b"output.log", 32)
    assert platform.folder_events._inotify_names(data) == ["state.json", "", "output.log"]


@linux_only
def test_a_replaced_state_is_an_event_with_its_name(tmp_path: Path) -> None:
    events = platform.open_folder_events()
    assert events is not None
    try:
        assert events.watch(tmp_path)
        replace_state(tmp_path)
        assert readable(events.fileno())
        assert "state.json" in events.names()
        assert events.names() == []  # drained, and never blocks
    finally:
        events.close()


@linux_only
def test_an_unwatched_folder_tells_nothing_more(tmp_path: Path) -> None:
    events = platform.open_folder_events()
    assert events is not None
    try:
        events.watch(tmp_path)
        events.unwatch(tmp_path)
        assert events.watched() == set()
        replace_state(tmp_path)
        names = events.names()  # at most the kernel's "watch removed" record, with no name
        assert "state.json" not in names
    finally:
        events.close()


@linux_only
def test_a_folder_that_is_gone_cannot_be_watched(tmp_path: Path) -> None:
    events = platform.open_folder_events()
    assert events is not None
    try:
        assert not events.watch(tmp_path / "gone")
    finally:
        events.close()


@pytest.mark.parametrize("system", ["win32", "darwin"])
def test_elsewhere_there_are_no_folder_events(monkeypatch: pytest.MonkeyPatch, system: str) -> None:
    monkeypatch.setattr(sys, "platform", system)
    assert platform.open_folder_events() is None


@linux_only
def test_the_watch_calls_back_for_state_and_for_nothing_else(tmp_path: Path) -> None:
    calls: list[str] = []
    loop = asyncio.new_event_loop()
    watch = StateWatch(lambda: calls.append("state"))
    try:
        watch.start(loop)
        assert watch.active
        watch.follow([tmp_path])
        fd = watch._events.fileno() if watch._events is not None else -1
        (tmp_path / "output.log").write_bytes(b"a line\n")
        assert readable(fd)
        watch._read()
        assert calls == []
        replace_state(tmp_path)
        assert readable(fd)
        watch._read()
        assert calls == ["state"]
    finally:
        watch.close()
        loop.close()


@linux_only
def test_only_the_unfinished_runs_folders_are_watched(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    loop = asyncio.new_event_loop()
    watch = StateWatch(lambda: None)
    try:
        watch.start(loop)
        assert watch._events is not None
        watch.follow([first, second])
        assert watch._events.watched() == {str(first), str(second)}
        watch.follow([second])  # the first run ended
        assert watch._events.watched() == {str(second)}
    finally:
        watch.close()
        loop.close()


@linux_only
def test_a_folder_that_cannot_be_watched_is_tried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.new_event_loop()
    watch = StateWatch(lambda: None)
    try:
        watch.start(loop)
        assert watch._events is not None
        tries: list[Path] = []
        monkeypatch.setattr(watch._events, "watch", lambda folder: tries.append(folder) or False)
        for _ in range(3):  # three rounds
            watch.follow([tmp_path / "gone"])
        assert tries == [tmp_path / "gone"]
    finally:
        watch.close()
        loop.close()


def test_without_folder_events_the_watch_does_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(state_watch.platform, "open_folder_events", lambda: None)
    loop = asyncio.new_event_loop()
    watch = StateWatch(lambda: None)
    try:
        watch.start(loop)
        assert not watch.active
        watch.follow([tmp_path])  # nothing to watch with: the rounds see the changes
        watch.close()
    finally:
        loop.close()


@linux_only
def test_closing_stops_reading_and_frees_the_descriptor(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    watch = StateWatch(lambda: None)
    try:
        watch.start(loop)
        assert watch._events is not None
        fd = watch._events.fileno()
        watch.close()
        assert not watch.active
        with pytest.raises(OSError):
            os.fstat(fd)
        assert not loop.remove_reader(fd)  # not read any more
    finally:
        loop.close()


def test_a_replaced_state_makes_the_next_round_due_at_most_a_fast_poll_after_the_last() -> None:
    follower = RunFollower(SimpleNamespace(views={}), listener=None)  # type: ignore[arg-type]
    follower._last_poll, follower._full_due = 100.0, 100.25  # a quiet round, the next one 250 ms away
    follower._state_replaced()
    assert follower._full_due == pytest.approx(100.0 + FAST_POLL)
    assert follower._wake.is_set()
    follower._full_due = 100.001  # already due sooner: left as it is
    follower._state_replaced()
    assert follower._full_due == 100.001


@contextlib.contextmanager
def started(watch: StateWatch) -> Iterator[StateWatch]:
    """``watch`` started on a loop of its own (its reader is called by hand: ``watch._read()``)."""
    loop = asyncio.new_event_loop()
    try:
        watch.start(loop)
        yield watch
    finally:
        watch.close()
        loop.close()


def append(path: Path, data: bytes) -> None:
    """As an agent appends: the file stays open (an append is told before any close)."""
    with open(path, "ab") as file:
        file.write(data)
        file.flush()


@linux_only
def test_an_appended_output_index_calls_back_for_lines_and_its_log_does_not(tmp_path: Path) -> None:
    calls: list[str] = []
    with started(StateWatch(lambda: calls.append("state"), lambda: calls.append("lines"))) as watch:
        watch.follow([tmp_path])
        assert watch.sees_every_run
        fd = watch._events.fileno() if watch._events is not None else -1
        append(tmp_path / "output.log", b"a line\n")  # the chunk, before its record
        assert readable(fd)
        watch._read()
        assert calls == []
        for index in ("output.idx", "output.t3.idx", "output.mid.idx"):  # the log's and its segments'
            append(tmp_path / index, b"\0" * 32)
            assert readable(fd)
            watch._read()
            assert calls == ["lines"], index
            calls.clear()


@linux_only
def test_a_state_written_in_place_is_told_once_it_is_closed(tmp_path: Path) -> None:
    """An append's event comes at each write: a ``state.json`` rewritten in place is read once
    whole (closed), never half-written."""
    calls: list[str] = []
    with started(StateWatch(lambda: calls.append("state"), lambda: calls.append("lines"))) as watch:
        watch.follow([tmp_path])
        fd = watch._events.fileno() if watch._events is not None else -1
        with open(tmp_path / "state.json", "w") as state:
            state.write('{"status": ')
            state.flush()
            assert readable(fd)
            watch._read()
            assert calls == [], "told while half-written"
            state.write('"running"}')
        assert readable(fd)
        watch._read()
        assert calls == ["state"]


@linux_only
def test_a_folder_that_cannot_be_watched_means_not_every_run_is_seen(tmp_path: Path) -> None:
    with started(StateWatch(lambda: None, lambda: None)) as watch:
        watch.follow([tmp_path])
        assert watch.sees_every_run
        watch.follow([tmp_path, tmp_path / "gone"])
        assert not watch.sees_every_run, "the gone folder's lines are seen at the rounds only"
        watch.follow([tmp_path])  # that run ended
        assert watch.sees_every_run


def test_without_folder_events_no_run_is_seen_by_the_watch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(state_watch.platform, "open_folder_events", lambda: None)
    with started(StateWatch(lambda: None, lambda: None)) as watch:
        watch.follow([tmp_path])
        assert not watch.sees_every_run


def idle_follower(sees_every_run: bool) -> RunFollower:
    follower = RunFollower(SimpleNamespace(views={}), listener=None)  # type: ignore[arg-type]
    follower._state_watch = SimpleNamespace(sees_every_run=sees_every_run)  # type: ignore[assignment]
    return follower


def test_written_lines_make_the_next_round_due_at_most_the_flowing_pace_after_the_last() -> None:
    follower = idle_follower(True)
    follower._last_poll, follower._full_due = 100.0, 100.1  # the quiet pace's next round
    follower._lines_written()
    assert follower._full_due == pytest.approx(100.0 + FAST_POLL)
    assert follower._wake.is_set()
    follower._wake.clear()
    follower._lines_written()  # the next write before that round: nothing comes sooner
    assert not follower._wake.is_set(), "woken for nothing"
    assert follower._full_due == pytest.approx(100.0 + FAST_POLL)
    follower._lines_last_poll, follower._full_due = FLOOD_LINES, 100.1  # a flood: its own pace
    follower._lines_written()
    assert follower._full_due == pytest.approx(100.0 + FLOOD_POLL)
    follower._full_due = 100.001  # already due sooner: left as it is
    follower._lines_written()
    assert follower._full_due == 100.001


@pytest.mark.parametrize(
    ("sees_every_run", "lines", "pace"),
    [
        (True, 1, WATCHED_POLL),  # lines flow, every write wakes a round: the watched pace between
        (False, 1, FAST_POLL),  # nothing wakes it (Windows, macOS, a folder not watched): every 5 ms
        (True, FLOOD_LINES, FLOOD_POLL),
        (False, FLOOD_LINES, FLOOD_POLL),
    ],
)
def test_the_pace_while_lines_flow_depends_on_whether_writes_wake_the_rounds(
    sees_every_run: bool, lines: int, pace: float
) -> None:
    follower = idle_follower(sees_every_run)
    follower._last_data = time.monotonic()  # lines came just now
    follower._lines_last_poll = lines
    assert follower._interval(busy=True) == pace
    assert idle_follower(sees_every_run)._interval(busy=False) == SLOW_POLL


@pytest.mark.parametrize(("sees_every_run", "pace"), [(True, WATCHED_POLL), (False, QUIET_POLL)])
def test_a_silent_runs_pace_depends_on_whether_its_writes_wake_the_rounds(
    sees_every_run: bool, pace: float
) -> None:
    follower = idle_follower(sees_every_run)
    follower._last_data = time.monotonic() - 2.0  # nothing for two seconds
    assert follower._interval(busy=True) == pace


async def test_lines_written_while_a_round_reads_bring_the_next_round_at_the_flowing_pace() -> None:
    """A write told while a round was reading may have come after its reads: the round's own pace
    (the quiet one) must not push the next round past the flowing pace."""
    follower = idle_follower(True)

    async def a_round_told_of_a_write() -> bool:
        follower._last_poll = follower._last_data = time.monotonic()
        follower._lines_last_poll = 1
        follower._lines_written()  # as the watch's reader, between the round's read and its end
        follower._closed = True  # one round only
        return True

    follower._round_safely = a_round_told_of_a_write  # type: ignore[method-assign]
    await follower._follow_forever()
    assert follower._full_due <= follower._last_poll + FAST_POLL


def test_where_no_write_wakes_the_rounds_an_empty_round_doubles_the_pace_up_to_its_most() -> None:
    """Windows and macOS (no inotify), or a folder inotify cannot watch: lines flowing at a trickle
    are polled 5 ms after a round that found lines, then 10, 20, 40 ms while rounds find none."""
    follower = idle_follower(False)
    follower._last_data = time.monotonic()
    paces = []
    for lines in (0, 0, 0, 0, 3, 0):
        follower._lines_last_poll = lines
        paces.append(follower._interval(busy=True))
    assert paces == [
        2 * FAST_POLL,
        4 * FAST_POLL,
        UNWOKEN_POLL_MOST,
        UNWOKEN_POLL_MOST,
        FAST_POLL,
        2 * FAST_POLL,
    ]


async def test_a_state_replaced_while_a_round_reads_brings_the_next_round_within_a_fast_poll() -> None:
    """As lines written: the round's own pace (the watched one, 500 ms) must not hold back a status
    change told while it read."""
    follower = idle_follower(True)

    async def a_round_told_of_a_state() -> bool:
        follower._last_poll = time.monotonic()
        follower._state_replaced()
        follower._closed = True  # one round only
        return True

    follower._round_safely = a_round_told_of_a_state  # type: ignore[method-assign]
    await follower._follow_forever()
    assert follower._full_due <= follower._last_poll + FAST_POLL
