"""A small log cap costs a flood a bounded number of syncs and renames (issue 39, item 7).

Under ``logs.maxRunMb`` 0.0625 (64 KB, the smallest cap) a flood used to
rotate a 16 KB tail segment every 16 KB, each rotation and drop saving
``output.segments.json`` (a sync and a rename) three times: 176 syncs, 176
renames and 128 file creations a megabyte, 60-200 times the uncapped write.
Now a tail segment is at least ``SEGMENT_FLOOR_BYTES`` (4 MiB; 1 MiB at first), and the
agent's writer saves the table on a thread of its own (``segment_commits``).
Counted here by wrapping the ``os`` functions, never timed. The background
saves keep the readers' promises: nothing beyond the saved table is read, a
dropped segment is deleted only after the table that drops it is saved, a
save that cannot be made (a full disk) loses no line.
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena_ls.run import segment_commits
from arena_ls.run.capture import Cursor, LogLine, OutputReader
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.logsegments import SEGMENT_FLOOR_BYTES, load_table, save_table_bytes, segment_bytes
from arena_ls.run.outputlog import STDOUT, OutputWriter
from tests.helpers.fuzzing import examples
from tests.helpers.waiting import wait_until
from tests.lifecycle.test_log_cap import SMALL, Trainer, check_lines, read_all

CAP_MB = 0.0625
CAP = 64 * 1024
LINE = b" INFO data shard 0042 batch ok checksum 9f3a2c1b elapsed 0.001\n"
FLOOD_MB = 24
GAP = re.compile(r"^… (\d+) lines \(.*\) of output were dropped here")
MECHANICS_FLOOR = 1 << 20
"""The segments of the tests of the saves' mechanics (held, failed, held open): 1 MiB, the floor
these tests were written for; the agent's floor is ``SEGMENT_FLOOR_BYTES`` (4 MiB)."""


def flood_chunks(megabytes: int, chunk: int = 64 * 1024, every: int = 0) -> Iterator[bytes]:
    """Numbered lines of 74 bytes (``benchmarks/trainers/flood.py``'s), in pipe-sized chunks; a
    progress announcement every ``every`` lines."""
    number = 0
    per_chunk = chunk // 74
    for _ in range(megabytes * (1 << 20) // (per_chunk * 74)):
        lines = []
        for _ in range(per_chunk):
            if every and number % every == 0:
                lines.append(b'@arena {"event": "progress", "step": %d, "loss": 0.5}\n' % number)
            else:
                lines.append(b"%d" % (10**10 + number) + LINE)
            number += 1
        yield b"".join(lines)


def capped_run(tmp_path: Path) -> Path:
    (tmp_path / "spec.json").write_text(json.dumps({"logMaxRunMb": CAP_MB}))
    return tmp_path


@pytest.fixture
def os_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts syncs, renames and file creations (``os.open`` with ``O_CREAT``, ``open(..., "wb")``)."""
    counts: Counter[str] = Counter()

    def counting(name: str, real: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    real_open = os.open

    def os_open(path: object, flags: int, *rest: object) -> int:
        if flags & os.O_CREAT:
            counts["create"] += 1
        return real_open(path, flags, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", counting("fsync", os.fsync))
    monkeypatch.setattr(os, "replace", counting("rename", os.replace))
    monkeypatch.setattr(os, "open", os_open)
    return counts


@pytest.mark.parametrize("background", [False, True], ids=["in-append", "background"])
def test_a_flood_under_the_smallest_cap_syncs_renames_and_creates_a_few_times_a_megabyte(
    tmp_path: Path, os_calls: Counter[str], background: bool
) -> None:
    """On main: 176 syncs and renames a megabyte (three table saves per 16 KB segment)."""
    writer = OutputWriter(capped_run(tmp_path), background_commits=background)
    for chunk in flood_chunks(FLOOD_MB):
        writer.append(STDOUT, chunk)
    writer.close()
    per_mb = {name: count / FLOOD_MB for name, count in os_calls.items()}
    assert per_mb["fsync"] <= 2.5, per_mb  # one per table save (two a 1 MiB segment), never per write
    assert per_mb["rename"] <= 2.5, per_mb
    assert per_mb["create"] <= 4.5, per_mb  # a segment's two files, the table's temporary file twice
    assert writer.commits <= 2.5 * FLOOD_MB
    table = load_table(tmp_path)
    assert table is not None and table.current.k <= FLOOD_MB + 1, "segments of at least 1 MiB (4 MiB now)"
    assert table.dropped_lines > 0


def test_the_smallest_cap_keeps_its_disk_bound_of_the_cap_and_one_segment(tmp_path: Path) -> None:
    writer = OutputWriter(capped_run(tmp_path), background_commits=True)
    for chunk in flood_chunks(8, every=50):
        writer.append(STDOUT, chunk)
    writer.close()
    on_disk = sum(
        path.stat().st_size
        for path in tmp_path.iterdir()
        if path.name.startswith("output.t") or path.stem == "output"
    )
    assert segment_bytes(CAP // 2) == SEGMENT_FLOOR_BYTES
    assert on_disk <= CAP + SEGMENT_FLOOR_BYTES + 200
    lines = list(iter_all_lines(tmp_path))
    steps = [json.loads(line.text[7:])["step"] for line in lines if line.text.startswith("@arena")]
    assert steps == list(range(0, steps[-1] + 1, 50)) and steps[-1] > writer.lines_written - 51
    seqs = [line.seq for line in lines]
    assert seqs == sorted(set(seqs))


class HeldSave:
    """A table save the test lets through: ``hold()`` blocks the committer in its next save."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.saves = 0
        self.fail: OSError | None = None

    def __call__(self, run_dir: Path, data: bytes) -> None:
        self.entered.set()
        assert self.gate.wait(60), "the test never let the save through"
        if self.fail is not None:
            raise self.fail
        save_table_bytes(run_dir, data)
        self.saves += 1

    def hold(self) -> None:
        self.entered.clear()
        self.gate.clear()


def background_writer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, save: HeldSave) -> OutputWriter:
    real = segment_commits.TableCommitter

    def committer(run_dir: Path) -> segment_commits.TableCommitter:
        return real(run_dir, save)

    monkeypatch.setattr("arena_ls.run.outputlog.TableCommitter", committer)
    return OutputWriter(capped_run(tmp_path), segment_floor=MECHANICS_FLOOR, background_commits=True)


def readable_seqs(run_dir: Path) -> list[int]:
    return [line.seq for line in iter_all_lines(run_dir)]


def test_a_save_held_up_never_holds_the_flood_for_long_nor_shows_a_reader_more_than_the_saved_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The committer is held in a save: the writer fills the segment it writes (its pipe is never
    held), readers see only what the saved table lists, and no segment the saved table lists is
    deleted. Let through, every line is readable and the dropped segments are gone."""
    save = HeldSave()
    writer = background_writer(tmp_path, monkeypatch, save)
    chunks = flood_chunks(16)
    for _ in range(48):  # 3 MiB: the head, a few segments, a drop or two
        writer.append(STDOUT, next(chunks))
    assert writer.flush(30)
    saved = load_table(tmp_path)
    assert saved is not None
    written = writer.lines_written
    save.hold()
    for _ in range(24):  # 1.5 MiB more: one rotation (and a drop), handed over, not saved
        writer.append(STDOUT, next(chunks))
    assert save.entered.wait(30), "a save was handed to the committer"
    assert writer.lines_written > written, "the writer wrote on while the save was held"
    held_table = load_table(tmp_path)
    assert held_table is not None and held_table.to_json() == saved.to_json(), "the saved table is unchanged"
    for tail in saved.tails:
        assert (tmp_path / f"output.t{tail.k}.log").exists(), "a segment the saved table lists is there"
    seqs = readable_seqs(tmp_path)
    assert seqs == sorted(set(seqs)) and seqs[-1] < writer.lines_written - 1, "the new segment unread"
    segment = writer._segment  # the file it writes (no public name for it)
    for _ in range(40):  # 2.5 MiB more: the next rotation waits for that save, a second at most, then
        writer.append(STDOUT, next(chunks))  # the segment grows on past 1 MiB (never a third unsaved one)
    assert writer._segment == segment and isinstance(writer.rotation_error, TimeoutError)
    save.gate.set()
    assert writer.flush(30)
    writer.close()
    table = load_table(tmp_path)
    assert table is not None
    assert readable_seqs(tmp_path)[-1] == writer.lines_written - 1, "every line readable once saved"
    listed = {tail.k for tail in table.tails}
    assert sorted(int(path.name.split(".")[1][1:]) for path in tmp_path.glob("output.t*.log")) == sorted(
        listed
    ), "the dropped segments were deleted once the table that drops them was saved"


def test_a_table_that_cannot_be_saved_loses_no_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk at every save: the writer stops rotating (its segment grows past the cap) and
    loses nothing; once saves succeed again (tried again by the committer) every line is read."""
    save = HeldSave()
    save.fail = OSError(errno.ENOSPC, "No space left on device")
    writer = background_writer(tmp_path, monkeypatch, save)
    for chunk in flood_chunks(6):
        writer.append(STDOUT, chunk)
    assert writer.rotation_error is not None, "the writer stopped moving on"
    save.fail = None  # space is back: the committer's next try succeeds
    assert writer.flush(30) or writer.flush(30)
    for chunk in flood_chunks(1):
        writer.append(STDOUT, chunk)
    writer.close()
    lines = list(iter_all_lines(tmp_path))
    gaps = [line for line in lines if GAP.match(line.text)]
    assert len(gaps) == 1
    match = GAP.match(gaps[0].text)
    assert match is not None
    seqs = [line.seq for line in lines if line not in gaps]
    assert seqs == sorted(set(seqs)) and seqs[-1] == writer.lines_written - 1
    assert int(match.group(1)) + len(seqs) == writer.lines_written, "every line read or counted as dropped"


def test_a_dropped_segment_held_open_is_deleted_later_by_the_committer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows: a reader holds the first dropped segment; it is deleted after a later save or at
    the close, and a writer started again sweeps what is left (``_dropped_leftovers``)."""
    from arena_ls import platform

    held = {"output.t1.log"}
    real_remove = platform.files.remove_file

    def remove_file(path: str | Path) -> bool:
        return False if Path(path).name in held else real_remove(path)

    monkeypatch.setattr(platform, "remove_file", remove_file)
    writer = OutputWriter(capped_run(tmp_path), segment_floor=MECHANICS_FLOOR, background_commits=True)
    for chunk in flood_chunks(4):
        writer.append(STDOUT, chunk)
    assert writer.flush(30)
    table = load_table(tmp_path)
    assert table is not None and table.oldest.k > 1 and (tmp_path / "output.t1.log").exists()
    wait_until(lambda: not (tmp_path / "output.t2.log").exists(), what="the segments not held deleted")
    writer.close()
    assert (tmp_path / "output.t1.log").exists(), "still held at the close"
    held.clear()
    again = OutputWriter(tmp_path, segment_floor=MECHANICS_FLOOR, background_commits=True)  # started again
    again.append(STDOUT, next(flood_chunks(1)))
    again.close()
    assert not (tmp_path / "output.t1.log").exists() and not (tmp_path / "output.t1.idx").exists()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("chunk"), st.integers(1, 400), st.sampled_from([0, 3, 17, 50])),
        st.tuples(st.just("arena"), st.just(0), st.just(0)),
        st.tuples(st.just("read"), st.integers(1, 500), st.just(0)),
        st.tuples(st.just("flush"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, width=st.sampled_from([10, 60, 300]))
def test_readers_during_background_saves_see_each_line_once_in_order_and_every_event_at_the_end(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]], width: int
) -> None:
    """The model of ``test_log_cap.py`` with the table saved on the committer's thread: a reader
    between saves sees an older table, never a line twice, out of order or wrong; after the last
    save every kept line is there."""
    run_dir = tmp_path_factory.mktemp("run")
    trainer = Trainer(run_dir, cap=64 * 1024)
    trainer.writer = OutputWriter(run_dir, max_bytes=64 * 1024, segment_floor=SMALL, background_commits=True)
    reader = OutputReader(run_dir)
    cursor = reader.start()
    seen: list[LogLine] = []
    for kind, count, every in ops:
        if kind == "chunk":
            trainer.chunk(count, every, width)
        elif kind == "arena":
            trainer.arena(f"arena note {len(trainer.lines)}")
        elif kind == "flush":
            assert trainer.writer.flush(30)
        else:
            reader.check_cursor(Cursor.decode(cursor.encode()))
            page = reader.read(Cursor.decode(cursor.encode()), count)
            assert page.damage is None and page.reset is None
            seen += page.lines
            cursor = page.cursor
    trainer.close()
    rest, _ = read_all(reader, cursor)
    check_lines(trainer, seen + rest)
    check_lines(trainer, list(iter_all_lines(run_dir)))
