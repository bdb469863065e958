"""Inert records (``FLAG_INERT``): a capped log's drop skips them unread, and loses nothing by it.

Past the head of a capped log (``logs.maxRunMb``), the writer marks a quiet record of a job without
patterns inert when its lines cannot even be progress (no ``/``, no "loss" in any ASCII case). A
drop of its tail segment keeps none of its lines and counts them from the records' sequence numbers
without reading the bytes back: a block-buffered flood under a 64 KB cap read every megabyte twice
(issue 39). Whatever a trainer prints, however its writes are cut, the log kept (head, middle,
tail, the gap's count) is the same with the flag as without it; a record whose numbers do not add
up is read back as before (real files, no process).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena_ls.run import log_drop
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.log_drop import extract
from arena_ls.run.log_record import inert_lines
from arena_ls.run.logkeep import event_filters
from arena_ls.run.logsegments import MIN_SEGMENT_BYTES, Tail, load_table, segment_paths
from arena_ls.run.outputlog import (
    ARENA,
    FLAG_CONTINUED,
    FLAG_INERT,
    FLAG_LINES,
    FLAG_QUIET,
    RECORD,
    STDERR,
    STDOUT,
    DamagedLog,
    OutputWriter,
    check_record,
)
from tests.helpers.fuzzing import examples

CAP = 128 * 1024
NEUTRAL = b"10000000001 INFO data shard 0042 batch ok checksum 9f3a2c1b elapsed 0.001\n"


def run_folder(folder: Path, **spec: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps({"jobId": "flood", **spec}), encoding="utf-8")
    return folder


def writer_for(folder: Path, cap: int | None = CAP) -> OutputWriter:
    return OutputWriter(folder, max_bytes=cap, segment_floor=MIN_SEGMENT_BYTES)


def all_flags(folder: Path) -> list[int]:
    """Every record's flags, the head's and each kept tail's, in order."""
    table = load_table(folder)
    segments = [0] + ([tail.k for tail in table.tails] if table is not None else [])
    flags: list[int] = []
    for k in segments:
        data = segment_paths(folder, k)[1].read_bytes()
        flags += [record[1] for record in RECORD.iter_unpack(data[: len(data) - len(data) % RECORD.size])]
    return flags


# -- the verdict ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "inert"),
    [
        (NEUTRAL * 3, True),
        (b"epoch 2 done\r\n", True),
        (b"step 5/100\n", False),
        (b"train LOSS 0.25\n", False),
        (b"Loss=0.25\n", False),
        (b"val_loss: 1.5\n", False),
        (b"path a/b\n", False),
        (NEUTRAL + b"\0 loss\n", False),  # a NUL: searched the Python way, found all the same
    ],
)
def test_lines_that_cannot_be_progress_are_inert(data: bytes, inert: bool) -> None:
    assert inert_lines(data) is inert


@pytest.mark.parametrize(
    ("stream", "flags"),
    [
        (STDOUT, FLAG_INERT),
        (STDOUT, FLAG_LINES | FLAG_INERT),
        (STDOUT, FLAG_CONTINUED | FLAG_QUIET | FLAG_INERT),
        (ARENA, FLAG_LINES | FLAG_QUIET | FLAG_INERT),
    ],
)
def test_an_inert_flag_no_writer_sets_is_damage(stream: int, flags: int) -> None:
    with pytest.raises(DamagedLog, match="unknown flags"):
        check_record(7, stream, flags, 10)


def test_check_record_gives_the_kind_without_the_inert_flag() -> None:
    assert check_record(0, STDERR, FLAG_LINES | FLAG_QUIET | FLAG_INERT, 10) == FLAG_LINES


def test_the_writer_marks_inert_only_past_the_head_of_a_capped_log(tmp_path: Path) -> None:
    folder = run_folder(tmp_path / "run")
    writer = writer_for(folder)
    for _ in range(40):  # 40 x 16 KB: the 64 KB head, then tail segments, some dropped
        writer.append(STDOUT, NEUTRAL * 220)
    writer.append(STDOUT, b"step 7/100 " + NEUTRAL)
    writer.append(STDOUT, b"LOSS " + NEUTRAL)
    writer.close()
    flags = all_flags(folder)
    quiet, inert = FLAG_LINES | FLAG_QUIET, FLAG_LINES | FLAG_QUIET | FLAG_INERT
    head = len(flags) - len(bytes(flags).lstrip(bytes([quiet])))
    assert head >= 4, "the head's records (and the chunk that crossed into the tails) are not inert"
    assert flags[head:-2] and set(flags[head:-2]) == {inert}
    assert flags[-2:] == [quiet, quiet], "a progress mark in any case keeps a record readable"


@pytest.mark.parametrize(
    ("spec", "cap"),
    [
        ({"progressPattern": r"it (?P<step>\d+)"}, CAP),
        ({"checkpointPattern": r"wrote (?P<step>\d+)"}, CAP),
        ({}, None),
    ],
    ids=["progress pattern", "checkpoint pattern", "uncapped"],
)
def test_no_record_is_inert_with_a_pattern_or_without_a_cap(
    tmp_path: Path, spec: dict[str, str], cap: int
) -> None:
    folder = run_folder(tmp_path / "run", **spec)
    writer = writer_for(folder, cap)
    for _ in range(40):
        writer.append(STDOUT, NEUTRAL * 220)
    writer.close()
    assert not any(flag & FLAG_INERT for flag in all_flags(folder))


# -- a drop that trusts it loses nothing ----------------------------------------------------------

LINES = st.sampled_from(
    [
        NEUTRAL,
        b"plain output line without marks\n",
        b"step 12/400 loss 0.25 lr 3e-4\n",
        b"epoch 3 LOSS=1.75\n",
        b'@arena {"event": "checkpoint", "step": 40, "path": "ckpt-40.pt"}\n',
        b"saved checkpoint step=40 path=ckpt-40.pt\n",
        b"CHECKPOINT step=41 written\n",
        b"windows line\r\n",
        b"\n",
        b"x" * 3000 + b"\n",
    ]
)
WRITES = st.lists(
    st.tuples(st.sampled_from([STDOUT, STDERR]), st.lists(LINES, min_size=1, max_size=300)),
    min_size=1,
    max_size=60,
)


def middle(folder: Path) -> bytes:
    """The middle's text (none: a drop kept no line, or nothing was dropped)."""
    path = folder / "output.mid.log"
    return path.read_bytes() if path.exists() else b""


def write_through(
    folder: Path, writes: list[tuple[int, list[bytes]]], *, inert: bool
) -> list[tuple[int, str]]:
    """Write ``writes`` through a capped writer (inert flags allowed or not); every line read back."""
    writer = writer_for(run_folder(folder))
    if not inert:
        writer._inert_allowed = False  # the writer before issue 39's flag
    for number, (stream, lines) in enumerate(writes):
        writer.append(stream, b"".join(lines))
        if number % 7 == 3:
            writer.append_line(ARENA, f"the agent's own line {number}")
    writer.close()
    return [(line.seq, f"{line.stream} {line.text}") for line in iter_all_lines(folder)]


@settings(
    max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(writes=WRITES)
def test_a_drop_of_inert_records_keeps_and_counts_what_reading_them_would(
    tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[int, list[bytes]]]
) -> None:
    root = tmp_path_factory.mktemp("inert")
    with_flag = write_through(root / "with", writes, inert=True)
    without = write_through(root / "without", writes, inert=False)
    assert with_flag == without
    tables = [load_table(root / name) for name in ("with", "without")]
    fields = ("mid_records", "mid_bytes", "dropped_lines", "dropped_bytes", "dropped_records", "gap_seq")
    if tables[0] is None or tables[1] is None:
        assert tables[0] is tables[1] is None
        return
    assert [getattr(tables[0], name) for name in fields] == [getattr(tables[1], name) for name in fields]
    assert middle(root / "with") == middle(root / "without")


def test_a_flood_under_a_small_cap_drops_inert_records_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The point of the flag: of a flood's dropped megabytes the drop reads back only the one chunk
    that crossed from the head into the tails (written before the writer was past the head)."""
    folder = run_folder(tmp_path / "run")
    read_back: list[int] = []

    class CountedFile(io.FileIO):
        def read(self, size: int | None = -1, /) -> bytes:
            data = super().read(size)
            if str(self.name).endswith(".log"):
                read_back.append(len(data))
            return data

    monkeypatch.setattr(log_drop, "open", lambda path, mode: CountedFile(path, mode), raising=False)
    writer = writer_for(folder)
    chunk = NEUTRAL * 220
    for _ in range(60):
        writer.append(STDOUT, chunk)
    writer.close()
    table = load_table(folder)
    assert table is not None and table.mid_records == 0
    assert table.dropped_bytes > 30 * len(chunk)
    assert 0 < sum(read_back) <= len(chunk)
    kept = sum(1 for line in iter_all_lines(folder) if line.stream == "stdout")
    assert table.dropped_lines == 60 * 220 - kept


# -- damage: numbers that do not add up are read back ---------------------------------------------


def handmade_segment(
    folder: Path, seqs: list[int], flags: int = FLAG_LINES | FLAG_QUIET | FLAG_INERT
) -> Tail:
    """Tail segment 1 of ``len(seqs)`` records of two NEUTRAL lines each, at the given seqs."""
    log_path, idx_path = segment_paths(folder, 1)
    data = NEUTRAL * 2
    log_path.write_bytes(data * len(seqs))
    idx_path.write_bytes(
        b"".join(
            RECORD.pack(STDOUT, flags, len(data), seq, number * len(data), 0.0)
            for number, seq in enumerate(seqs)
        )
    )
    return Tail(1, 100, seqs[0])


KEEPERS = event_filters(None, None)


@pytest.mark.parametrize(
    ("seqs", "end_seq", "lines"),
    [
        ([10, 12, 14], 16, 6),  # the numbers add up: counted from them
        ([10, 12, 14], None, 6),  # the next tail's first seq unknown: the last record is read
        ([10, 9, 14], 16, 2 + 5 + 2),  # a seq going back: that record is read, the next counted
        ([10, 12, 14], 10**12, 6),  # more lines than bytes: read
        ([10, 10, 12], 14, 6),  # a record of no line: read (it holds two)
    ],
)
def test_an_inert_record_whose_numbers_do_not_add_up_is_read_back(
    tmp_path: Path, seqs: list[int], end_seq: int | None, lines: int
) -> None:
    """Damage the drop can see (a count below one line, or above one a byte) reads the record; the
    count of lines dropped is all that the sequence numbers decide (the gap line's figure)."""
    tail = handmade_segment(tmp_path, seqs)
    drop = extract(tmp_path, tail, KEEPERS, end_seq)
    assert (drop.lines, drop.bytes, drop.source_records, drop.records) == (lines, 6 * len(NEUTRAL), 3, 0)


def test_the_same_segment_without_the_flag_is_counted_alike(tmp_path: Path) -> None:
    tail = handmade_segment(tmp_path, [10, 12, 14], FLAG_LINES | FLAG_QUIET)
    drop = extract(tmp_path, tail, KEEPERS, 16)
    assert (drop.lines, drop.bytes, drop.gap_seq) == (6, 6 * len(NEUTRAL), 15)
