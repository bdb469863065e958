"""One reader of a run's records: each record read once, parsed once, handed to every subscriber.

A run's captured output (``capture``) is read here, incrementally, from a
record cursor, and each record is turned once into typed items: the agent's
own lines (``AgentLine``, the ``arena`` stream), the trainer's announcements
(``TrainerEvent``: progress, checkpoint, eval) and its health lines
(``HealthPoint``). Every subscriber (the run view's progress, the insights'
observations) receives the same items, in log order; however many there are,
the capture is read and parsed once per change.

A subscriber that comes late (the insights start following a run the view
has read for a while, or a run adopted mid-way) is caught up by a reader of
its own from the record it asks for, and joins the shared one once it has
reached it: the records in between are read twice once, never in the steady
state. Nothing is kept of what was read: the reader holds a record number,
the parser's one flag, and its subscribers.

``arena/metrics`` reads pages from a client's cursor, keeping nothing between
requests: it uses the line grammar of this module (``decode_line``), one
line at a time, so that a page can stop and resume inside a record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import attrs

from arena_ls.lifecycle.capture import iter_records
from arena_ls.lifecycle.events import Event, EventParser
from arena_ls.lifecycle.health_line import MARK, PREFIX, HealthPoint, health_in_chunk, parse_health
from arena_ls.lifecycle.outputlog import ARENA, RECORD
from arena_ls.lifecycle.supervisor_events import SupervisorEvent, parse_bytes

MAX_RECORDS_PER_READ = 20_000
MAX_BYTES_PER_READ = 16 << 20
READ_BUDGET_SECONDS = 0.004
"""CPU one read spends on a run's new records at most (it runs on the event loop, which is never
held over 5 ms while a run streams, issue 24): a backlog is caught up over several reads."""
FULL_PARSE_BYTES = 256 << 10
"""A record longer than this (a flood's chunk) gives every announcement, but progress only from
its last 256 KiB."""
BEHIND_PARSE_BYTES = 4 << 10
"""The same for a record that is not the last one written yet (a backlog): its progress is
passed at once by the records after it, so only its last 4 KiB are read for it, as the agent
reads a flood; its announcements are all read."""


@attrs.frozen(slots=True)
class AgentLine:
    """A line the run's agent wrote (the ``arena`` stream): its typed record (``event``: starting,
    restarting, ...) and the words it renders to."""

    text: str
    at: float
    event: SupervisorEvent


@attrs.frozen(slots=True)
class TrainerEvent:
    """Progress, a checkpoint or an eval the trainer announced, and when its record arrived."""

    event: Event
    at: float


Item = AgentLine | TrainerEvent | HealthPoint


class Subscriber(Protocol):
    """What a consumer of a run's records implements."""

    def take(self, item: Item) -> None:
        """One item, in log order."""


def decode_agent_record(data: bytes, at: float) -> list[Item]:
    """The agent's lines of one record, each a typed supervisor event (or an earlier agent's plain
    line, read as the event it stood for)."""
    return [_agent_line(raw, at) for raw in data.splitlines()]


def _agent_line(raw: bytes, at: float) -> AgentLine:
    event = parse_bytes(raw)
    return AgentLine(event.render(), at, event)


def decode_record(
    parser: EventParser, stream: int, data: bytes, at: float, *, behind: bool = False
) -> list[Item]:
    """Every item of one record: the one parse of it, for every subscriber.

    ``behind``: more records follow it already (see ``BEHIND_PARSE_BYTES``)."""
    if stream == ARENA:
        return decode_agent_record(data, at)
    tail = BEHIND_PARSE_BYTES if behind else FULL_PARSE_BYTES
    items: list[Item] = [TrainerEvent(event, at) for event in parser.parse_flood(data, tail)]
    items.extend(health_in_chunk(data, at))
    return items


def might_hold_items(parser: EventParser, stream: int, data: bytes) -> bool:
    """Cheap pre-filter for a line-by-line reader: can a line of this record give an item?"""
    if stream == ARENA:
        return bool(data)
    return parser.might_match(data) or MARK in data


def decode_line(parser: EventParser, stream: int, raw: bytes, at: float) -> Item | None:
    """The item one line gives (a page reader's unit: it may stop between two lines)."""
    if stream == ARENA:
        return _agent_line(raw, at)
    if raw.startswith(PREFIX) and MARK in raw:
        health = parse_health(raw.decode("utf-8", "replace"), at)
        if health is not None:
            return health
    line = raw.decode("utf-8", "replace")
    if "\r" in line:
        line = line.rsplit("\r", 1)[-1] or line
    event = parser.parse_safely(line)
    return TrainerEvent(event, at) if event is not None else None


@attrs.define
class ReadCounter:
    """How often a reader opened the capture and how many records it parsed (for tests)."""

    reads: int = 0
    parsed: int = 0


class RunRecords:
    """A run's records from ``start`` on, parsed once, fanned out to the subscribers."""

    def __init__(
        self,
        run_dir: Path,
        new_parser: Callable[[], EventParser],
        start: int = 0,
        *,
        counter: ReadCounter | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.new_parser = new_parser
        self.parser = new_parser()
        self.next_record = start
        self.counter = counter if counter is not None else ReadCounter()
        self.subscribers: list[Subscriber] = []
        self.catching_up: list[RunRecords] = []
        """Readers of late subscribers, each from its own start up to this reader's ``next_record``."""

    def start_at(self, record: int) -> None:
        """Follow from ``record`` (an adopted run's tail), before anything was read."""
        self.next_record = record

    def subscribe(self, subscriber: Subscriber, *, from_record: int | None = None) -> None:
        """Hand ``subscriber`` every item from here on, or from ``from_record`` (caught up first)."""
        if from_record is None or from_record >= self.next_record:
            self.subscribers.append(subscriber)
            return
        behind = RunRecords(self.run_dir, self.new_parser, from_record, counter=self.counter)
        behind.subscribers.append(subscriber)
        self.catching_up.append(behind)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers = [s for s in self.subscribers if s is not subscriber]
        for behind in self.catching_up:
            behind.unsubscribe(subscriber)
        self.catching_up = [behind for behind in self.catching_up if behind.subscribers]

    @property
    def caught_up(self) -> bool:
        """No late subscriber is still behind."""
        return not self.catching_up

    def read_new(
        self,
        limit: int = MAX_RECORDS_PER_READ,
        max_bytes: int = MAX_BYTES_PER_READ,
        budget: float = READ_BUDGET_SECONDS,
    ) -> None:
        """Read and hand out the records written since the last call (bounded: ``limit`` records,
        about ``max_bytes``, ``budget`` seconds of CPU); late subscribers' readers move on too."""
        count = record_count(self.run_dir)
        if not self.catching_up and self.next_record >= count:
            return  # nothing new: one stat, no open
        deadline = time.thread_time() + budget
        self._read(count, limit, max_bytes, deadline)
        for behind in list(self.catching_up):
            # At least one record each call: a late subscriber always gets there.
            behind._read(self.next_record, limit, max_bytes, max(deadline, time.thread_time()), stop=True)
            if behind.next_record >= self.next_record:
                self.catching_up.remove(behind)
                self.subscribers.extend(behind.subscribers)

    def _read(self, end: int, limit: int, max_bytes: int, deadline: float, *, stop: bool = False) -> None:
        """Records from ``next_record``; ``end`` is where the index ended when the read began (a
        catch-up reader's ``stop``: the shared reader's position, never passed)."""
        if stop and self.next_record >= end:
            return
        self.counter.reads += 1
        read = 0
        for count, (index, stream, _, data, at) in enumerate(self._records()):
            if stop and index >= end:
                return
            self.next_record = index + 1
            read += len(data)
            self.counter.parsed += 1
            for item in decode_record(self.parser, stream, data, at, behind=index + 1 < end):
                for subscriber in self.subscribers:
                    subscriber.take(item)
            if count + 1 >= limit or read >= max_bytes or time.thread_time() > deadline:
                return

    def _records(self) -> Iterator[tuple[int, int, int, bytes, float]]:
        return iter_records(self.run_dir, self.next_record)


def record_count(run_dir: Path) -> int:
    """How many records the run's index holds (0 without one)."""
    try:
        return (run_dir / "output.idx").stat().st_size // RECORD.size
    except OSError:
        return 0
