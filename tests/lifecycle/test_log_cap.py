"""``logs.maxRunMb`` (contract 7.1, issue 23 failure 5): one run's log is capped, its events kept.

The writer and the readers of the capped format, without a server: a log
written past its cap keeps its head and its tail, its middle's events and
arena lines, and one gap line; cursors read across the drop, taken before it
or after, each kept line exactly once and in order. On main a run's log grew
without bound (``output.log`` / ``output.idx`` only).
"""

from __future__ import annotations

import errno
import os
import re
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from arena_ls import platform
from arena_ls.run.capture import RECORD, Cursor, LogLine, OutputReader
from arena_ls.run.capture_records import iter_all_lines, iter_records
from arena_ls.run.logsegments import (
    MIN_SEGMENT_BYTES,
    SEGMENTS_FILE,
    load_table,
    segment_bytes,
    segment_paths,
)
from arena_ls.run.outputlog import ARENA, STDERR, STDOUT, OutputWriter
from tests.helpers.fuzzing import examples

CAP = 128 * 1024
"""A small cap: 64 KiB of head, 64 KiB of tail in 16 KiB segments (``SMALL``: the agent's own
segments are at least 1 MiB, ``SEGMENT_FLOOR_BYTES``; the format is the same at any size, and
16 KiB ones show many drops in a few hundred kilobytes)."""
SMALL = MIN_SEGMENT_BYTES
GAP = re.compile(r"^… (\d+) lines \(.*\) of output were dropped here")


class Trainer:
    """Writes numbered lines through a real writer and remembers what each seq was."""

    def __init__(self, run_dir: Path, cap: int | None = CAP) -> None:
        self.writer = OutputWriter(run_dir, max_bytes=cap, segment_floor=SMALL)
        self.lines: list[tuple[str, str, bool]] = []
        """(stream, text, kept: an event or an arena line) by seq."""

    def chunk(self, count: int, event_every: int, width: int = 60, stream: int = STDOUT) -> None:
        texts = []
        for _ in range(count):
            seq = len(self.lines) + len(texts)
            if event_every and seq % event_every == 0:
                kind = ("progress", "checkpoint", "eval", "health")[seq // event_every % 4]
                texts.append(f'@arena {{"event": "{kind}", "step": {seq}, "loss": 1.5, "gradNorm": 2.0}}')
            elif event_every and seq % event_every == 1:
                texts.append(f"step {seq}/100000 loss 0.25")  # a built-in progress spelling
            else:
                texts.append(f"plain {seq} " + "x" * width)
        self.writer.append(stream, ("\n".join(texts) + "\n").encode())
        name = ("stdout", "stderr")[stream]
        self.lines += [(name, text, not text.startswith("plain")) for text in texts]

    def arena(self, text: str) -> None:
        self.writer.append_line(ARENA, text)
        self.lines.append(("arena", text, True))

    def close(self) -> None:
        self.writer.close()


def read_all(reader: OutputReader, cursor: Cursor, limit: int = 997) -> tuple[list[LogLine], Cursor]:
    lines: list[LogLine] = []
    while True:
        reader.check_cursor(Cursor.decode(cursor.encode()))
        page = reader.read(Cursor.decode(cursor.encode()), limit)
        assert page.damage is None and page.reset is None
        lines += page.lines
        if not page.lines and page.cursor == cursor:
            return lines, cursor
        cursor = page.cursor


def check_lines(trainer: Trainer, lines: list[LogLine]) -> int:
    """Each line read is the one written at its seq (or the gap line), kept lines all there once.

    Returns how many lines the gap line says were dropped (0 without one)."""
    seqs = [line.seq for line in lines]
    assert seqs == sorted(set(seqs)), "every line once, in order"
    gaps = [line for line in lines if GAP.match(line.text)]
    for line in lines:
        if line in gaps:
            continue
        stream, text, _ = trainer.lines[line.seq]
        assert (line.stream, line.text) == (stream, text), f"seq {line.seq}"
    read = {line.seq for line in lines}
    missing_kept = [seq for seq, (_, _, kept) in enumerate(trainer.lines) if kept and seq not in read]
    assert missing_kept == [], "every event and arena line is kept"
    match = GAP.match(gaps[-1].text) if gaps else None
    return int(match.group(1)) if match else 0


def log_bytes(run_dir: Path) -> int:
    """The head and tails on disk (log and index): what the cap bounds."""
    total = 0
    for path in run_dir.iterdir():
        if re.fullmatch(r"output(\.t\d+)?\.(log|idx)", path.name):
            total += path.stat().st_size
    return total


def events_of(run_dir: Path) -> list[bytes]:
    """The event and arena lines the scanners (metrics, insights) see, in order."""
    found = []
    for _, stream, _, data, _ in iter_records(run_dir):
        for raw in data.splitlines():
            if stream == ARENA or (raw and not raw.startswith(b"plain")):
                found.append(raw)
    return found


def test_a_log_past_its_cap_keeps_head_tail_events_and_one_gap_line(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path)
    trainer.arena("starting job")
    for _ in range(200):
        trainer.chunk(40, event_every=37)
    trainer.close()
    assert log_bytes(tmp_path) <= CAP + segment_bytes(CAP // 2, SMALL) + 200
    lines = list(iter_all_lines(tmp_path))
    dropped = check_lines(trainer, lines)
    read = {line.seq for line in lines if not GAP.match(line.text)}  # the gap line takes a dropped seq
    lost = [seq for seq in range(len(trainer.lines)) if seq not in read]
    assert dropped == len(lost) > 0, "the gap line counts the lines dropped"
    assert sum(1 for line in lines if GAP.match(line.text)) == 1
    assert lines[0].seq == 0 and lines[-1].seq == len(trainer.lines) - 1, "head and tail kept"
    table = load_table(tmp_path)
    assert table is not None
    head = [line for line in lines if line.seq < table.head_end_seq]
    assert [line.seq for line in head] == list(range(table.head_end_seq)), "the head is whole"
    expected = [text.encode() for stream, text, kept in trainer.lines if kept]
    assert events_of(tmp_path) == expected, "the scanners see every event, in order"


def test_a_cursor_taken_before_the_drop_reads_on_with_the_gap_then_the_next_kept_line(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path)
    for _ in range(30):
        trainer.chunk(40, event_every=23)  # past the head: into the first tails
    reader = OutputReader(tmp_path)
    first, cursor = read_all(reader, reader.start())
    page = reader.read(reader.tail_cursor(50), 10)  # a client that looked at the tail, inside a tail segment
    stale = page.cursor
    assert stale.segment != 0
    for _ in range(100):
        trainer.chunk(40, event_every=23)  # its segment is dropped meanwhile
    table = load_table(tmp_path)
    assert table is not None and table.oldest.k > stale.segment, "the cursor's segment is gone"
    reader.check_cursor(Cursor.decode(stale.encode()))
    later = reader.read(Cursor.decode(stale.encode()), 5)
    assert later.damage is None and later.reset is None
    assert all(line.seq >= stale.seq for line in later.lines)
    rest, _ = read_all(reader, stale)
    assert any(GAP.match(line.text) for line in rest), "told that lines were dropped"
    kept_after = [seq for seq, (_, _, kept) in enumerate(trainer.lines) if kept and seq >= stale.seq]
    assert [line.seq for line in rest if line.seq in set(kept_after)] == kept_after
    continued, _ = read_all(reader, cursor)  # the first client, at the end of the first part
    check_lines(trainer, first + continued)


def test_a_reader_holding_a_table_saved_over_since_reads_the_dropped_segments_kept_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader reads the table; the agent (another process) saves a newer one and deletes a
    tail the older one lists, before the reader looks at that tail's files. The tail's kept lines
    are read from the middle, not skipped as an empty segment (a CI run lost 63 kept lines so)."""
    trainer = Trainer(tmp_path)
    while (table := load_table(tmp_path)) is None or len(table.tails) < 2:
        trainer.chunk(40, event_every=7)
    assert table.mid_records == 0, "nothing dropped yet"
    reader = OutputReader(tmp_path)
    first = reader.read(reader.start(), table.head_end_seq)  # the head: next comes the oldest tail
    assert first.lines[-1].seq == table.head_end_seq - 1
    while (newer := load_table(tmp_path)) is not None and newer.oldest.k == table.oldest.k:
        trainer.chunk(40, event_every=7)  # the oldest tail is dropped, its files deleted
    assert not segment_paths(tmp_path, table.oldest.k)[1].exists()
    read_table = OutputReader._table
    stale = [table]

    def read_before_the_save(self: OutputReader, *, fresh: bool = False) -> object:
        if stale and not fresh:
            return stale.pop()
        return read_table(self, fresh=True) if fresh else read_table(self)

    monkeypatch.setattr(OutputReader, "_table", read_before_the_save)
    page = reader.read(first.cursor, 997)
    assert not stale, "the read began with the table it read before the save"
    assert page.damage is None and page.reset is None
    rest, _ = read_all(reader, page.cursor)
    check_lines(trainer, first.lines + page.lines + rest)


def test_a_writer_started_again_continues_the_segments(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path)
    for _ in range(60):
        trainer.chunk(40, event_every=11)
    trainer.close()
    trainer.writer = OutputWriter(tmp_path, max_bytes=CAP, segment_floor=SMALL)  # an agent revived
    for _ in range(60):
        trainer.chunk(40, event_every=11)
    trainer.close()
    lines = list(iter_all_lines(tmp_path))
    assert check_lines(trainer, lines) > 0
    assert log_bytes(tmp_path) <= CAP + segment_bytes(CAP // 2, SMALL) + 200


def test_without_a_cap_the_log_is_one_file_pair(tmp_path: Path) -> None:
    trainer = Trainer(tmp_path, cap=None)
    for _ in range(100):
        trainer.chunk(40, event_every=0)
    trainer.close()
    assert not (tmp_path / SEGMENTS_FILE).exists()
    assert [line.seq for line in iter_all_lines(tmp_path)] == list(range(4000))


def test_the_cap_comes_from_the_runs_spec(tmp_path: Path) -> None:
    (tmp_path / "spec.json").write_text('{"logMaxRunMb": 0.125}')
    writer = OutputWriter(tmp_path)
    for _ in range(100):
        writer.append(STDOUT, b"".join(b"%08d %s\n" % (n, b"y" * 90) for n in range(100)))
    writer.close()
    assert log_bytes(tmp_path) <= CAP + segment_bytes(CAP // 2) + 200


def test_a_rotation_that_cannot_be_made_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk as the table is written: the segment grows on, every line kept."""
    import arena_ls.run.outputlog as outputlog

    def no_space(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(outputlog, "save_table", no_space)
    trainer = Trainer(tmp_path)
    for _ in range(50):
        trainer.chunk(40, event_every=0)
    trainer.close()
    assert [line.seq for line in iter_all_lines(tmp_path)] == list(range(2000))
    assert trainer.writer.rotation_error is not None


def test_a_segment_held_open_is_deleted_at_a_later_drop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows: a reader (antivirus, an editor) holds a dropped segment; it is not listed, then goes."""
    held: set[str] = set()
    real_remove = os.remove

    def remove(path: str | os.PathLike[str]) -> None:
        if Path(path).name in held:
            raise platform.win_error(platform.ERROR_SHARING_VIOLATION, "DeleteFileW", str(path))
        real_remove(path)

    monkeypatch.setattr(os, "remove", remove)
    held.update({"output.t1.log", "output.t1.idx"})
    trainer = Trainer(tmp_path)
    for _ in range(80):
        trainer.chunk(40, event_every=13)
    table = load_table(tmp_path)
    assert table is not None and 1 in table.doomed and table.tail(1) is None
    assert (tmp_path / "output.t1.log").exists()
    check_lines(trainer, list(iter_all_lines(tmp_path)))
    held.clear()  # the reader lets go
    for _ in range(20):
        trainer.chunk(40, event_every=13)
    table = load_table(tmp_path)
    assert table is not None and table.doomed == []
    assert not (tmp_path / "output.t1.log").exists()
    trainer.close()
    check_lines(trainer, list(iter_all_lines(tmp_path)))


def test_the_windows_delete_retries_a_sharing_violation_then_reports_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``platform.remove_file``'s Win32 branch, with the platform faked."""
    monkeypatch.setattr(platform.files, "sys", types.SimpleNamespace(platform="win32"))
    target = tmp_path / "segment"
    target.write_bytes(b"x")
    failures = iter([platform.ERROR_SHARING_VIOLATION, platform.ERROR_SHARING_VIOLATION])
    real_remove = os.remove

    def remove(path: str) -> None:
        code = next(failures, None)
        if code is not None:
            raise platform.win_error(code, "DeleteFileW", path)
        real_remove(path)

    monkeypatch.setattr(os, "remove", remove)
    assert platform.remove_file(target) is True and not target.exists(), "retried until the reader let go"
    target.write_bytes(b"x")
    monkeypatch.setattr(
        os, "remove", lambda path: (_ for _ in ()).throw(platform.win_error(32, "DeleteFileW", path))
    )
    assert platform.remove_file(target) is False and target.exists(), "held for good: tried again later"
    monkeypatch.setattr(os, "remove", real_remove)
    assert platform.remove_file(tmp_path / "never-there") is True, "already gone counts as deleted"


# --------------------------------------------------------------------------- the model

Op = tuple[str, int, int]
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("chunk"), st.integers(1, 120), st.sampled_from([0, 1, 3, 17, 50])),
        st.tuples(st.just("flood"), st.integers(100, 1500), st.sampled_from([0, 7, 101])),
        st.tuples(st.just("stderr"), st.integers(1, 20), st.sampled_from([0, 5])),
        st.tuples(st.just("arena"), st.just(0), st.just(0)),
        st.tuples(st.just("read"), st.integers(1, 300), st.just(0)),
        st.tuples(st.just("tail"), st.integers(0, 400), st.just(0)),
    ),
    min_size=1,
    max_size=60,
)


def pages(reader: OutputReader, cursor: Cursor, limit: int) -> Iterator[LogLine]:
    page = reader.read(Cursor.decode(cursor.encode()), limit)
    assert page.damage is None and page.reset is None
    yield from page.lines


@settings(
    max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, width=st.sampled_from([10, 60, 300]))
def test_random_writes_and_reads_see_every_kept_line_once_in_order(
    tmp_path_factory: pytest.TempPathFactory, ops: list[Op], width: int
) -> None:
    run_dir = tmp_path_factory.mktemp("run")
    trainer = Trainer(run_dir, cap=64 * 1024)
    reader = OutputReader(run_dir)
    cursor = reader.start()
    seen: list[LogLine] = []
    tails: list[Cursor] = []
    for kind, count, every in ops:
        if kind == "chunk":
            trainer.chunk(count * 3, every, width)
        elif kind == "flood":
            trainer.chunk(count, every, width)
        elif kind == "stderr":
            trainer.chunk(count, every, width, stream=STDERR)
        elif kind == "arena":
            trainer.arena(f"arena note {len(trainer.lines)}")
        elif kind == "read":
            reader.check_cursor(Cursor.decode(cursor.encode()))
            page = reader.read(Cursor.decode(cursor.encode()), count)
            assert page.damage is None and page.reset is None
            seen += page.lines
            cursor = page.cursor
        else:
            tails.append(reader.tail_cursor(count))
    rest, _ = read_all(reader, cursor)
    dropped_seen = check_lines(trainer, seen + rest)
    fresh = list(iter_all_lines(run_dir))
    dropped = check_lines(trainer, fresh)
    event("lines were dropped" if dropped else "nothing dropped")
    assert dropped == len(trainer.lines) - len([line for line in fresh if not GAP.match(line.text)])
    assert dropped_seen <= dropped
    for tail in tails:  # a tail cursor, read after later writes (and drops)
        reader.check_cursor(Cursor.decode(tail.encode()))
        lines, _ = read_all(reader, tail)
        check_lines_from(trainer, lines, tail.seq)
    expected = [text.encode() for _, text, kept in trainer.lines if kept]
    assert events_of(run_dir) == expected
    limit = 64 * 1024 + segment_bytes(32 * 1024, SMALL) + width + 200 + RECORD.size
    assert log_bytes(run_dir) <= limit
    trainer.close()


def check_lines_from(trainer: Trainer, lines: list[LogLine], start: int) -> None:
    seqs = [line.seq for line in lines]
    assert seqs == sorted(set(seqs))
    assert all(seq >= start for seq in seqs)
    read = set(seqs)
    kept = [seq for seq, (_, _, is_kept) in enumerate(trainer.lines) if is_kept and seq >= start]
    assert [seq for seq in kept if seq not in read] == []


def test_segment_paths_name_the_head_and_the_tails(tmp_path: Path) -> None:
    assert segment_paths(tmp_path, 0) == (tmp_path / "output.log", tmp_path / "output.idx")
    assert segment_paths(tmp_path, 3) == (tmp_path / "output.t3.log", tmp_path / "output.t3.idx")


def test_a_cursor_into_a_segment_the_log_never_had_is_refused(tmp_path: Path) -> None:
    from arena_ls.run.capture import InvalidCursor

    plain = tmp_path / "plain"
    plain.mkdir()
    uncapped = Trainer(plain, cap=None)
    uncapped.chunk(10, event_every=0)
    with pytest.raises(InvalidCursor, match="segment"):
        OutputReader(plain).check_cursor(Cursor(record=1, offset=0, seq=3, segment=2))
    capped = tmp_path / "capped"
    capped.mkdir()
    trainer = Trainer(capped)
    for _ in range(100):
        trainer.chunk(40, event_every=9)
    reader = OutputReader(capped)
    table = load_table(capped)
    assert table is not None
    with pytest.raises(InvalidCursor, match="segment"):
        reader.check_cursor(Cursor(record=1, offset=0, seq=3, segment=table.current.k + 5))
    with pytest.raises(InvalidCursor, match="dropped middle"):
        reader.check_cursor(Cursor(record=1, offset=0, seq=10**9, segment=1))
    reader.check_cursor(Cursor(record=1, offset=0, seq=table.head_end_seq + 1, segment=1))  # dropped: valid
    with pytest.raises(InvalidCursor):
        reader.check_cursor(
            Cursor(record=table.current.base, offset=7, seq=table.current.first_seq, segment=table.current.k)
        )


async def test_metrics_pages_read_across_the_drop_every_event_once(tmp_path: Path) -> None:
    """``arena/metrics`` paged while the run floods past its cap: every point once, in order."""
    from arena_ls.lifecycle.runview import RunView
    from arena_ls.protocol.metrics_request import MetricsCursor, metrics_page
    from arena_ls.run.rundir import RunDir, RunSpec, RunState
    from arena_ls.run.runlock import RunLock
    from arena_ls.run.state_folder import StateFolder
    from arena_ls.run.states import RunStatus

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="lm", job_name="lm", kind="train", argv=["x"], cwd=".")

    folder = StateFolder(tmp_path / "state")
    run: RunDir = RunLock(folder).claim("lm", build)
    writer = OutputWriter(run.path, max_bytes=CAP, segment_floor=SMALL)
    step = 0

    def flood(records: int) -> None:
        """Records of two steps each, noise around each event: a page can stop inside one."""
        nonlocal step
        for _ in range(records):
            data = ""
            for _ in range(2):
                step += 1
                data += "".join(f"noise {step} {i} {'q' * 60}\n" for i in range(10))
                data += f'@arena {{"event": "progress", "step": {step}, "loss": 0.5}}\n'
            writer.append(STDOUT, data.encode())

    view = RunView(run, run.read_spec())
    flood(100)  # 200 steps, past the cap: the tail holds the last 80-odd
    points: list[int] = []
    cursor = None
    while not points or points[-1] < 185:  # a cursor in the tail, inside a record (15 points a page)
        page = await metrics_page(view, cursor, 15)
        points += [point["step"] for point in page["points"]]
        cursor = MetricsCursor.decode(page["next"])
    assert cursor.line > 0, "inside a record"
    table = load_table(run.path)
    assert table is not None and cursor.record >= table.oldest.base, "the cursor points into a tail"
    flood(200)  # the records that cursor points into are dropped meanwhile
    table = load_table(run.path)
    assert table is not None and cursor.record < table.oldest.base, "its record is in the dropped middle"
    writer.close()
    run.write_state(RunState(run_id=run.run_id, job_id="lm", status=RunStatus.SUCCEEDED))
    while cursor is not None:
        page = await metrics_page(view, cursor, 15)
        points += [point["step"] for point in page["points"]]
        cursor = MetricsCursor.decode(page["next"]) if page["next"] else None
    assert points == list(range(1, step + 1))


def test_a_revived_cluster_agent_counts_the_dropped_lines_it_copied(tmp_path: Path) -> None:
    """``trainer_lines_after``: the lines of a submission already in the log, those dropped included
    (else a new agent copies Ray's log again from where the count fell short)."""
    from arena_ls.run.capture_records import trainer_lines_after

    trainer = Trainer(tmp_path)
    trainer.chunk(30, event_every=0)
    trainer.arena("submitting to cluster lab as sid-1")
    marker = len(trainer.lines) - 1
    for _ in range(100):
        trainer.chunk(40, event_every=7)
        trainer.arena("a note of arena's own")
    trainer.close()
    assert load_table(tmp_path) is not None
    copied = sum(1 for stream, _, _ in trainer.lines[marker + 1 :] if stream != "arena")
    assert (
        trainer_lines_after(tmp_path, lambda line: line.text == "submitting to cluster lab as sid-1")
        == copied
    )
    assert trainer_lines_after(tmp_path, lambda line: line.text == "no such marker") == sum(
        1 for s, _, _ in trainer.lines if s != "arena"
    )


def test_a_drop_that_cannot_load_its_filters_keeps_the_tail_and_trims_once_it_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first drop loads ``logkeep`` on the pump's thread; an import that fails there (CI saw
    one: another thread importing attrs at the same instant) must not escape ``append``: the
    writer keeps every line and grows past its cap, and trims at the next write that can."""
    import sys

    trainer = Trainer(tmp_path)
    monkeypatch.setitem(sys.modules, "arena_ls.run.logkeep", None)  # `import` of it raises ImportError
    for _ in range(80):
        trainer.chunk(100, event_every=7)
    table = load_table(tmp_path)
    assert table is None or table.dropped_lines == 0, "nothing could be dropped without the filters"
    grown = sum(path.stat().st_size for path in tmp_path.glob("output*.log"))
    assert grown > 2 * CAP, "the log grew past its cap rather than lose a line or fail the write"

    monkeypatch.undo()
    trainer.chunk(100, event_every=7)
    table = load_table(tmp_path)
    assert table is not None and table.dropped_lines > 0, "trimmed once the filters load"
    trainer.writer.close()
    texts = [line.text for line in iter_all_lines(tmp_path)]
    kept = [text for _, text, is_event in trainer.lines if is_event]
    assert all(text in texts for text in kept), "every event and arena line is kept"
