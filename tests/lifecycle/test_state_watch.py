"""The follower is woken when an agent replaces an unfinished run's ``state.json`` (``StateWatch``).

Real inotify on real folders (Linux; the platform without it is faked); no process. Every wait for
an event is ``select`` with a deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
import os
import select
import struct
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from arena_ls import platform
from arena_ls.lifecycle import state_watch
from arena_ls.lifecycle.follower import FAST_POLL, RunFollower
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
