"""One reader per run: each record read and parsed once, whoever follows the run (real files, no process)."""

from __future__ import annotations

import json
import threading
import tracemalloc
from pathlib import Path

import pytest

from arena_ls.insights.tracker import RunTracker
from arena_ls.lifecycle import records as records_module
from arena_ls.lifecycle.health_line import HealthPoint
from arena_ls.lifecycle.records import AgentLine, Item, ReadCounter, RunRecords, TrainerEvent, record_count
from arena_ls.lifecycle.runview import RING_LINES, RunView
from arena_ls.run.outputlog import ARENA, STDERR, STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir
from arena_ls.run.trainer_announcements import Checkpoint, EventParser, Progress
from tests.helpers.runs import claim_run


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return claim_run(tmp_path)


class Collector:
    """A subscriber that keeps what it was handed."""

    def __init__(self) -> None:
        self.items: list[Item] = []

    def take(self, item: Item) -> None:
        self.items.append(item)


def write(run: RunDir, stream: int, *texts: str) -> None:
    """One record per call: the lines of one write of the trainer (or one line of the agent)."""
    writer = OutputWriter(run.path)
    if stream == ARENA:
        for text in texts:
            writer.append_line(ARENA, text)
    else:
        writer.append(stream, "".join(f"{text}\n" for text in texts).encode())
    writer.close()


def health(step: int) -> str:
    return "@arena " + json.dumps({"event": "health", "gradNorm": 1.5, "clipFraction": 0.25, "step": step})


def checkpoint(step: int) -> str:
    return "@arena " + json.dumps({"event": "checkpoint", "step": step, "path": f"ckpt/{step}.pt"})


def a_run_of_every_kind(run: RunDir) -> None:
    write(run, ARENA, "starting python train.py (attempt 1)")
    write(run, STDOUT, "step 1/10 loss 2.0", "step 2/10 loss 1.9", health(2))
    write(run, STDERR, "a warning the trainer printed")
    write(run, STDOUT, checkpoint(2), "step 3/10 loss 1.8")
    write(run, ARENA, "restarting from step 2")
    write(run, STDOUT, "step 3/10 loss 1.7")


def kinds(items: list[Item]) -> list[str]:
    described: list[str] = []
    for item in items:
        if isinstance(item, AgentLine):
            described.append(f"agent {item.text.split()[0]}")
        elif isinstance(item, HealthPoint):
            described.append(f"health {item.step}")
        elif isinstance(item.event, Progress):
            described.append(f"progress {item.event.step}")
        else:
            described.append(f"{type(item.event).__name__.lower()} {item.event.step}")
    return described


EVERY_KIND = [
    "agent starting",
    "progress 1",
    "progress 2",
    "health 2",
    "checkpoint 2",
    "progress 3",
    "agent restarting",
    "progress 3",
]


def test_every_kind_of_item_reaches_every_subscriber_in_log_order(run: RunDir) -> None:
    a_run_of_every_kind(run)
    records = RunRecords(run.path, EventParser)
    first, second = Collector(), Collector()
    records.subscribe(first)
    records.subscribe(second)
    records.read_new()
    assert kinds(first.items) == EVERY_KIND
    assert first.items == second.items
    assert records.next_record == record_count(run.path) == 6


def test_the_view_and_the_insights_share_one_read_and_one_parse_of_each_record(run: RunDir) -> None:
    view = RunView(run, run.read_spec())
    counter = ReadCounter()
    view.records.counter = counter
    tracker = RunTracker(view.records, created_at=0.0)  # subscribed before anything was read
    a_run_of_every_kind(run)
    view.read_new_lines()
    tracker.read_new()  # the insights' tick: nothing new to read
    assert counter.parsed == 6, "each of the 6 records parsed once for both consumers"
    assert counter.reads == 1, "the capture opened once for the one change"
    assert (view.progress.step, view.progress.total, view.progress.loss) == (3, 10, 1.7)
    assert view.seen_checkpoint is not None and view.seen_checkpoint.step == 2
    obs = tracker.obs
    assert [point.step for point in obs.losses] == [1, 2, 3, 3]
    assert [mark.step for mark in obs.checkpoints] == [2]
    assert [(point.step, point.grad_norm) for point in obs.health] == [(2, 1.5)]

    write(run, STDOUT, "step 4/10 loss 1.6")
    tracker.read_new()  # whichever consumer comes first reads it, for both
    view.read_new_lines()
    assert counter.parsed == 7 and counter.reads == 2
    assert view.progress.step == 4 and obs.step == 4


def test_a_late_subscriber_is_caught_up_from_the_start_then_shares_the_reads(run: RunDir) -> None:
    view = RunView(run, run.read_spec())
    counter = ReadCounter()
    view.records.counter = counter
    a_run_of_every_kind(run)
    view.read_new_lines()
    late = Collector()
    view.records.subscribe(late, from_record=0)
    assert not view.records.caught_up
    view.records.read_new()
    assert kinds(late.items) == EVERY_KIND, "the history, in order, before anything new"
    assert view.records.caught_up
    assert counter.parsed == 12, "caught up once: the 6 records a second time"
    write(run, STDOUT, "step 4/10 loss 1.6")
    view.read_new_lines()
    assert counter.parsed == 13, "from then on, once"
    assert kinds(late.items)[-1] == "progress 4"
    assert view.progress.step == 4


def test_a_late_subscriber_gets_everything_once_even_while_the_run_writes_on(run: RunDir) -> None:
    """Caught up a record per read while the shared reader runs ahead: no gap and no repeat."""
    records = RunRecords(run.path, EventParser)
    early, late = Collector(), Collector()
    records.subscribe(early)
    for step in range(1, 6):
        write(run, STDOUT, f"step {step}/100 loss 1.0")
    records.read_new()
    records.subscribe(late, from_record=0)
    for step in range(6, 40):
        write(run, STDOUT, f"step {step}/100 loss 1.0")
        records.read_new(budget=0.0)  # no CPU left: one record each
    while not records.caught_up:
        records.read_new(budget=0.0)
    records.read_new()
    expected = [f"progress {step}" for step in range(1, 40)]
    assert kinds(early.items) == expected
    assert kinds(late.items) == expected


def test_an_adopted_run_is_followed_from_its_tail_and_its_insights_from_its_first_record(run: RunDir) -> None:
    writer = OutputWriter(run.path)  # one writer, one record a line (``write`` syncs at each close)
    for step in range(1, 3001):
        writer.append(STDOUT, f"step {step}/3000 loss {1.0 / step}\n".encode())
    writer.close()
    assert record_count(run.path) == 3000
    view = RunView(run, run.read_spec())
    view.start_live_at_tail()
    while view.records.next_record < 3000:  # the adopt's read is bounded (CPU): the next polls read on
        view.records.read_new()
    assert view.records.counter.parsed == RING_LINES, "from the tail's record, never from the first"
    assert view.progress.step == 3000
    tracker = RunTracker(view.records, created_at=0.0)
    while not view.records.caught_up:
        tracker.read_new()
    steps = [point.step for point in tracker.obs.losses]
    assert steps == list(range(3000 - len(steps) + 1, 3001)), "in order, the last ones kept"
    assert tracker.obs.step == 3000


def test_a_record_that_fails_to_parse_costs_no_other_item(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trainer line the parser chokes on is an ordinary line: the checkpoint beside it still counts."""
    real = EventParser.parse

    def choking(self: EventParser, text: str) -> object:
        if "choke" in text:
            raise RuntimeError("a parser bug")
        return real(self, text)

    monkeypatch.setattr(EventParser, "parse", choking)
    write(run, STDOUT, "step 1/10 loss 2.0 choke", checkpoint(1), "step 2/10 loss 1.0")
    records = RunRecords(run.path, EventParser)
    seen = Collector()
    records.subscribe(seen)
    records.read_new()
    assert kinds(seen.items) == ["checkpoint 1", "progress 2"]


def test_a_damaged_index_stops_the_reader_at_the_damage_and_loses_what_came_before(run: RunDir) -> None:
    write(run, STDOUT, "step 1/10 loss 2.0")
    write(run, STDOUT, "step 2/10 loss 1.0")
    with open(run.path / "output.idx", "ab") as idx:
        idx.write(b"\x09" * 34)  # a record with stream byte 9: no writer makes it
    records = RunRecords(run.path, EventParser)
    seen = Collector()
    records.subscribe(seen)
    records.read_new()
    records.read_new()
    assert kinds(seen.items) == ["progress 1", "progress 2"]
    assert records.next_record == 2


def test_an_unsubscribed_consumer_hears_nothing_more(run: RunDir) -> None:
    view = RunView(run, run.read_spec())
    tracker = RunTracker(view.records, created_at=0.0)
    tracker.close()
    write(run, STDOUT, checkpoint(5))
    view.read_new_lines()
    assert view.seen_checkpoint is not None and not tracker.obs.checkpoints
    assert view.records.subscribers == [view.subscription] and view.records.caught_up


def test_memory_does_not_grow_with_the_log(run: RunDir) -> None:
    """The reader keeps no item: 20x the records costs no more memory than the first batch."""
    records = RunRecords(run.path, EventParser)

    class KeepsNothing:
        def take(self, item: Item) -> None:
            assert isinstance(item, TrainerEvent | AgentLine | HealthPoint)

    records.subscribe(KeepsNothing())

    def batch(start: int) -> None:
        writer = OutputWriter(run.path)
        for step in range(start, start + 500):
            writer.append(STDOUT, f"step {step}/1000000 loss 1.0\n{checkpoint(step)}\n".encode())
        writer.close()
        while records.next_record < record_count(run.path):
            records.read_new()

    batch(0)
    tracemalloc.start()
    try:
        batch(500)
        first, _ = tracemalloc.get_traced_memory()
        for start in range(1000, 10_500, 500):
            batch(start)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - first < 64 << 10, f"{after - first} bytes more after 19 more batches"


def test_checkpoints_announced_in_a_flood_reach_the_view_even_past_a_jump(run: RunDir) -> None:
    """The live log skips a flood to its tail; the records reader never skips a checkpoint."""
    view = RunView(run, run.read_spec())
    filler = "x" * 1000
    write(
        run,
        STDOUT,
        *(f"{i} {filler}" for i in range(100)),
        checkpoint(7),
        *(f"{i} {filler}" for i in range(200)),
    )
    view.read_new_lines()
    assert view.take_unsummarised() > 0, "the log view jumped over the checkpoint's line"
    assert view.seen_checkpoint == Checkpoint(step=7, path="ckpt/7.pt")


def test_a_backlog_of_floods_gives_every_announcement_and_the_latest_progress(run: RunDir) -> None:
    """Records already followed by others are read for their announcements and their last lines."""
    filler = "y" * 70
    for chunk in range(3):
        steps = range(chunk * 5000, (chunk + 1) * 5000)
        lines = [f"step {step}/15000 loss 1.0 {filler}" for step in steps]
        lines.insert(2500, checkpoint(chunk * 5000 + 2500))
        write(run, STDOUT, *lines)
    records = RunRecords(run.path, EventParser)
    seen = Collector()
    records.subscribe(seen)
    while records.next_record < record_count(run.path):
        records.read_new()
    described = kinds(seen.items)
    assert [text for text in described if text.startswith("checkpoint")] == [
        "checkpoint 2500",
        "checkpoint 7500",
        "checkpoint 12500",
    ]
    assert described[-1] == "progress 14999"
    steps = [item.event.step for item in seen.items if isinstance(item, TrainerEvent)]
    assert steps == sorted(steps), "in log order"


def test_a_checkpoint_line_the_view_read_is_known_to_a_decision_at_once(run: RunDir) -> None:
    """The records reader may lag the log under a backlog; a decision makes it reach the lines first."""
    view = RunView(run, run.read_spec())
    writer = OutputWriter(run.path)  # one writer, one record a write (``write`` syncs at each close)
    for step in range(400):
        writer.append(STDOUT, f"step {step}/1000 loss 1.0\n".encode())
    writer.append(STDOUT, f"{checkpoint(399)}\n".encode())
    writer.close()
    view.records.read_new = lambda *args, **kwargs: RunRecords.read_new(view.records, limit=1)  # type: ignore[method-assign]
    view.read_new_lines()
    assert view.cursor.record == 401 and view.records.next_record < 401, "lagging, as under a flood"
    view.read_announcements_of_lines()
    assert view.seen_checkpoint == Checkpoint(step=399, path="ckpt/399.pt")


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read ahead holds the loop's reads until the worker says otherwise (never by the clock)."""
    monkeypatch.setattr(records_module, "AHEAD_HOLD_SECONDS", 3600.0)


@pytest.mark.usefixtures("held")
def test_records_read_ahead_on_a_worker_thread_reach_every_subscriber_once_in_order(run: RunDir) -> None:
    """A flood's records are read and decoded off the loop; the loop hands out what was decoded."""
    records = RunRecords(run.path, EventParser)
    early, late = Collector(), Collector()
    records.subscribe(early)
    for step in range(1, 6):
        write(run, STDOUT, f"step {step}/100 loss 1.0")
    thread = threading.Thread(target=records.read_ahead)
    thread.start()
    thread.join()
    assert early.items == [] and records.next_record == 0, "nothing handed out off the loop"
    records.subscribe(late, from_record=0)
    write(run, STDOUT, checkpoint(6), "step 6/100 loss 1.0")
    records.read_new()
    assert kinds(early.items) == [f"progress {step}" for step in range(1, 6)], "the loop only hands out"
    for _ in range(3):
        thread = threading.Thread(target=records.read_ahead)
        thread.start()
        thread.join()
        records.deliver()
    expected = [*(f"progress {step}" for step in range(1, 6)), "checkpoint 6", "progress 6"]
    assert kinds(early.items) == expected
    assert kinds(late.items) == expected
    assert records.caught_up and records.next_record == record_count(run.path)


@pytest.mark.usefixtures("held")
def test_a_decision_waits_for_the_worker_and_reads_while_the_worker_reads_ahead(run: RunDir) -> None:
    view = RunView(run, run.read_spec())
    write(run, STDOUT, "step 1/10 loss 1.0")
    view.apply_batch(view.read_batch(records=True))
    assert view.progress.step == 1, "the read ahead's items come with the batch"
    write(run, STDOUT, checkpoint(2))
    view.read_new_lines()
    assert view.seen_checkpoint is None, "the worker reads ahead: the loop's read only hands out"
    view.read_announcements_of_lines()
    assert view.seen_checkpoint == Checkpoint(step=2, path="ckpt/2.pt")
    view.records.end_ahead()
    write(run, STDOUT, "step 3/10 loss 1.0")
    view.read_new_lines()
    assert view.progress.step == 3, "the flood is over: the loop reads again"


def test_reading_on_two_threads_at_once_hands_out_every_item_once_in_order(run: RunDir) -> None:
    """The worker reads ahead in a loop while the loop's thread reads, hands out and subscribes."""
    records = RunRecords(run.path, EventParser)
    early, late = Collector(), Collector()
    records.subscribe(early)
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            records.read_ahead(budget=0.0, hold=0.0)  # one record a read, the loop free to read too

    thread = threading.Thread(target=worker)
    thread.start()
    writer = OutputWriter(run.path)  # one writer, one record a write (``write`` syncs at each close)
    try:
        for step in range(1, 201):
            writer.append(STDOUT, f"step {step}/200 loss 1.0\n".encode())
            records.read_new(budget=0.0)
            if step == 50:
                records.subscribe(late, from_record=0)
    finally:
        writer.close()
        stop.set()
        thread.join()
    while records.next_record < record_count(run.path) or not records.caught_up:
        records.read_new(wait=True)
    expected = [f"progress {step}" for step in range(1, 201)]
    assert kinds(early.items) == expected
    assert kinds(late.items) == expected
