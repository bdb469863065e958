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

import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import attrs

from arena_ls.lifecycle.health_line import MARK, PREFIX, HealthPoint, health_in_chunk, parse_health
from arena_ls.run.agent_records import AgentRecord, parse_bytes
from arena_ls.run.capture_records import iter_records
from arena_ls.run.outputlog import ARENA, FLAG_QUIET, RECORD
from arena_ls.run.trainer_announcements import Event, EventParser

MAX_RECORDS_PER_READ = 20_000
MAX_BYTES_PER_READ = 16 << 20
READ_BUDGET_SECONDS = 0.004
"""CPU one read spends on a run's new records at most (it runs on the event loop, which is never
held over 5 ms while a run streams, issue 24): a backlog is caught up over several reads."""
READ_AHEAD_SECONDS = 0.05
"""The same for a read on the follower's worker thread during a flood (``read_ahead``): off the
loop, it may read more at once, and keeps up with a flood's records."""
AHEAD_HOLD_SECONDS = 0.5
"""After a read ahead, the loop's reads only hand out for this long (the follower's next round
reads on, 20 ms later in a flood); should its rounds stop, the loop reads again."""
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
    event: AgentRecord


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
    parser: EventParser, stream: int, data: bytes, at: float, *, behind: bool = False, quiet: bool = False
) -> list[Item]:
    """Every item of one record: the one parse of it, for every subscriber.

    ``behind``: more records follow it already (see ``BEHIND_PARSE_BYTES``). ``quiet``: its writer
    found nothing in it but progress can be (``FLAG_QUIET``): only its tail is read, for progress."""
    if stream == ARENA:
        return decode_agent_record(data, at)
    tail = BEHIND_PARSE_BYTES if behind else FULL_PARSE_BYTES
    if quiet:
        return [TrainerEvent(event, at) for event in parser.parse_quiet(data, tail)]
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


@attrs.define(eq=False)
class _CatchUp:
    """A late subscriber's own reading, from the record it asked for up to the shared reader's.

    ``record`` and ``parser`` are the reader's (``RunRecords`` holds its lock to read on);
    ``subscribers`` and the joining are the event loop's, when the items are handed out."""

    subscribers: list[Subscriber]
    record: int
    parser: EventParser
    reached: bool = False
    """A read took it to the shared reader's position: it joins the shared subscribers when that
    read's items are handed out, and is read no more."""


@attrs.frozen
class _Read:
    """One read's decoded items, in log order, waiting to be handed out (``RunRecords.deliver``)."""

    end: int
    """The shared reader's position after it."""
    items: list[Item]
    catch_ups: list[tuple[_CatchUp, list[Item], bool]]
    """The late subscribers' items of the same read (each up to ``end``), whom they go to, and
    whether this read took them to the shared reader (they join it once these are handed out:
    told here, not read off the ``_CatchUp``, which a later read on the worker may have marked
    already)."""


class RunRecords:
    """A run's records from ``start`` on, parsed once, fanned out to the subscribers.

    Reading and handing out are two steps. A read (``read_new`` on the event loop,
    ``read_ahead`` on the follower's worker thread during a flood) opens the capture,
    decodes the new records into items with the one parser, and queues them; ``deliver``
    hands the queued items to the subscribers, on the event loop only, in the order they
    were read. So the reading may be done on either thread while the subscribers (the run's
    view, the insights, which the loop owns) are only ever called on the loop.

    One lock makes the reading single-owner: the reader's position, its parser and every late
    subscriber's catch-up reading (position, parser) are touched only by whoever holds it,
    never by two threads at once (the parser keeps state between records: ``speaks_arena``).
    A read on the loop never waits for it (the worker is reading: the loop hands out what is
    ready and reads no more), except ``read_new(wait=True)``, a decision's read. While the
    worker reads ahead (``read_ahead``, each follower round of a flood) the loop's reads only
    hand out: the records are then decoded off the loop, and a round's batch brings their
    items with its lines.

    ``next_record`` is the position handed out (what the subscribers have had); the reader's
    own may be ahead of it by the queued reads.
    """

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
        """The records handed out so far (loop only)."""
        self.counter = counter if counter is not None else ReadCounter()
        self.subscribers: list[Subscriber] = []
        self.catching_up: list[_CatchUp] = []
        """Late subscribers still being read up to the shared reader (appended and dropped on the loop;
        a read on the worker reads a copy of the list)."""
        self._lock = threading.Lock()
        self._record = start
        """Where the next read starts (under ``_lock``)."""
        self._ready: deque[_Read] = deque()
        """Reads not yet handed out, oldest first (appended under ``_lock``, taken on the loop)."""
        self._ahead_until = 0.0
        """Until then the worker reads (``read_ahead``) and the loop's ``read_new`` only hands out."""

    def start_at(self, record: int) -> None:
        """Follow from ``record`` (an adopted run's tail), before anything was read."""
        self.next_record = self._record = record

    def subscribe(self, subscriber: Subscriber, *, from_record: int | None = None) -> None:
        """Hand ``subscriber`` every item from here on, or from ``from_record`` (caught up first)."""
        if from_record is None or from_record >= self.next_record:
            self.subscribers.append(subscriber)
            return
        self.catching_up.append(_CatchUp([subscriber], from_record, self.new_parser()))

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self.subscribers = [s for s in self.subscribers if s is not subscriber]
        for behind in self.catching_up:
            behind.subscribers = [s for s in behind.subscribers if s is not subscriber]
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
        *,
        wait: bool = False,
    ) -> None:
        """Read and hand out the records written since the last call (bounded: ``limit`` records,
        about ``max_bytes``, ``budget`` seconds of CPU); late subscribers' readers move on too.

        On the event loop. While the worker reads ahead, or holds the reader now, only what is
        ready is handed out; ``wait`` (a decision that must know every line read) waits for the
        reader and reads anyway."""
        self.deliver()
        if not wait and time.monotonic() < self._ahead_until:
            return
        count = record_count(self.run_dir)
        if not self.catching_up and self._record >= count:
            return  # nothing new: one stat, no open
        if not self._lock.acquire(blocking=wait):
            return
        try:
            self._read(count, limit, max_bytes, budget)
        finally:
            self._lock.release()
        self.deliver()

    def read_ahead(self, budget: float = READ_AHEAD_SECONDS, hold: float | None = None) -> None:
        """Read and decode the new records, off the event loop, for ``deliver`` to hand out on it.

        On the follower's worker thread, with a flood's lines (``RunView.read_batch``): the loop's
        own reads only hand out for ``hold`` seconds after it (``AHEAD_HOLD_SECONDS``; the next
        round reads on). A read that fails leaves the reading to the loop, where a failure is
        handled."""
        count = record_count(self.run_dir)
        if self.catching_up or self._record < count:
            with self._lock:
                self._read(count, MAX_RECORDS_PER_READ, MAX_BYTES_PER_READ, budget)
        self._ahead_until = time.monotonic() + (AHEAD_HOLD_SECONDS if hold is None else hold)

    def end_ahead(self) -> None:
        """The worker reads ahead no more (the flood is over): the loop's reads read again."""
        self._ahead_until = 0.0

    def deliver(self) -> None:
        """Hand the items read so far to the subscribers, in log order (on the event loop)."""
        while self._ready:
            read = self._ready.popleft()
            for item in read.items:
                for subscriber in self.subscribers:
                    subscriber.take(item)
            self.next_record = read.end
            for behind, items, reached in read.catch_ups:
                for item in items:
                    for subscriber in behind.subscribers:
                        subscriber.take(item)
                if reached and behind in self.catching_up:
                    self.catching_up.remove(behind)
                    self.subscribers.extend(behind.subscribers)

    def _read(self, end: int, limit: int, max_bytes: int, budget: float) -> None:
        """One read, queued (``_lock`` held): the shared reader's records, then each late
        subscriber's up to where the shared reader got (at least one record each, so that a late
        subscriber always gets there)."""
        deadline = time.thread_time() + budget
        self._record, items = self._decode(self.parser, self._record, end, limit, max_bytes, deadline)
        catch_ups: list[tuple[_CatchUp, list[Item], bool]] = []
        for behind in list(self.catching_up):
            if behind.reached:
                continue
            late = max(deadline, time.thread_time())
            behind.record, got = self._decode(
                behind.parser, behind.record, self._record, limit, max_bytes, late, stop=True
            )
            behind.reached = behind.record >= self._record
            catch_ups.append((behind, got, behind.reached))
        self._ready.append(_Read(self._record, items, catch_ups))

    def _decode(
        self,
        parser: EventParser,
        start: int,
        end: int,
        limit: int,
        max_bytes: int,
        deadline: float,
        *,
        stop: bool = False,
    ) -> tuple[int, list[Item]]:
        """The items of the records from ``start``, and the position after the last one read;
        ``end`` is where the index ended when the read began (a catch-up's ``stop``: the shared
        reader's position, never passed)."""
        items: list[Item] = []
        if stop and start >= end:
            return start, items
        self.counter.reads += 1
        position = start
        read = 0

        def quiet_tail(index: int) -> int:  # what decode_record parses of a quiet record
            return BEHIND_PARSE_BYTES if index + 1 < end else FULL_PARSE_BYTES

        records = iter_records(self.run_dir, start, quiet_tail)
        for count, (index, stream, flags, data, at) in enumerate(records):
            if stop and index >= end:
                break
            position = index + 1
            read += len(data)
            self.counter.parsed += 1
            quiet = bool(flags & FLAG_QUIET)
            items.extend(decode_record(parser, stream, data, at, behind=index + 1 < end, quiet=quiet))
            if count + 1 >= limit or read >= max_bytes or time.thread_time() > deadline:
                break
        return position, items


def record_count(run_dir: Path) -> int:
    """How many records the run's index holds (0 without one)."""
    try:
        return (run_dir / "output.idx").stat().st_size // RECORD.size
    except OSError:
        return 0
