"""Quiet records (``FLAG_QUIET``): the writer's one verdict, and readers that trust it lose nothing.

The agent's writer marks a record of the trainer's lines quiet when nothing in it but progress can
be announced (no ``@arena`` line, no "checkpoint" in any case, a job without ``checkpoint.pattern``);
the agent's scan and the server's one record reader then look at its tail only, for progress, and
search it for nothing else. Whatever a trainer prints, however its writes are cut, the items a
reader yields are the same with the flag as without it, and every checkpoint of the output is among
them (real files, no process).
"""

from __future__ import annotations

import itertools
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena_ls.lifecycle.health_line import HealthPoint
from arena_ls.lifecycle.records import AgentLine, Item, RunRecords, TrainerEvent, record_count
from arena_ls.run.capture_records import iter_records
from arena_ls.run.checkpoint_lines import chunk_mentions_checkpoint, mentions_checkpoint
from arena_ls.run.outputlog import (
    ARENA,
    FLAG_CONTINUED,
    FLAG_FINAL_PARTIAL,
    FLAG_LINES,
    FLAG_QUIET,
    RECORD,
    STDOUT,
    DamagedLog,
    OutputWriter,
    check_record,
    quiet_lines,
)
from arena_ls.run.rundir import RunDir
from arena_ls.run.trainer_announcements import Checkpoint, EventParser, Progress
from tests.helpers import runs
from tests.helpers.fuzzing import examples


def claim_run(root: Path, checkpoint_pattern: str | None = None) -> RunDir:
    return runs.claim_run(root, checkpoint_pattern=checkpoint_pattern)


def record_flags(run_dir: Path) -> list[int]:
    data = (run_dir / "output.idx").read_bytes()
    return [flags for _, flags, *_ in RECORD.iter_unpack(data[: len(data) - len(data) % RECORD.size])]


NEUTRAL = b"10000000001 INFO data shard 0042 batch ok checksum 9f3a2c1b elapsed 0.001\n"


# -- the verdict ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lines",
    [
        NEUTRAL * 3,
        b"step 5/100 loss 2.31\n" * 3,  # progress: a level, read from the tail
        b"mail me at someone@example.org\n",  # an @ that begins no announcement
        b"a pointer, a joint, a check\n",
    ],
)
def test_lines_that_can_announce_nothing_but_progress_are_quiet(lines: bytes) -> None:
    assert quiet_lines(lines)


@pytest.mark.parametrize(
    "line",
    [
        b'@arena {"event": "checkpoint", "step": 5, "path": "c.pt"}\n',
        b'@arena {"event": "health", "gradNorm": 1.0}\n',
        b'some text then @arena {"event": "progress", "step": 1}\n',  # conservative: anywhere
        b"saved checkpoint step=5 path=c.pt\n",
        b"Saved CheckPoint step=5 path=c.pt\n",
        b"CHECKPOINT WRITTEN AT STEP 5\n",
        b"CHECKpoint saved: step=5\n",  # a mixed case the patterns read and the old test missed
    ],
)
def test_an_announcement_or_the_checkpoint_word_in_any_case_is_not_quiet(line: bytes) -> None:
    assert not quiet_lines(NEUTRAL + line + NEUTRAL)


def test_the_word_test_passes_every_case_the_built_in_patterns_read() -> None:
    parser = EventParser()
    for spelling in ("checkpoint", "Checkpoint", "CHECKPOINT", "CheckPoint", "cHeCkPoInT"):
        line = f"{spelling} saved: step=7"
        assert mentions_checkpoint(line) and chunk_mentions_checkpoint(line.encode())
        event = parser.parse(line)
        assert isinstance(event, Checkpoint) and event.step == 7, spelling


# -- the writer --------------------------------------------------------------------------------


def test_the_writer_marks_quiet_records_and_only_those(tmp_path: Path) -> None:
    run = claim_run(tmp_path)
    writer = OutputWriter(run.path)
    assert writer.append(STDOUT, NEUTRAL * 2).quiet
    assert not writer.append(STDOUT, b"saved checkpoint step=5 path=c.pt\n").quiet
    writer.append_line(ARENA, "starting python train.py (attempt 1)")
    assert not writer.append(STDOUT, b"no newline yet").quiet  # nothing recorded: not quiet
    writer.finish_stream(STDOUT)
    writer.close()
    assert record_flags(run.path) == [FLAG_LINES | FLAG_QUIET, FLAG_LINES, FLAG_LINES, FLAG_FINAL_PARTIAL]


def test_a_checkpoint_word_cut_between_two_reads_is_whole_in_its_record(tmp_path: Path) -> None:
    run = claim_run(tmp_path)
    writer = OutputWriter(run.path)
    first = writer.append(STDOUT, NEUTRAL + b"saved check")
    second = writer.append(STDOUT, b"point step=9 path=c.pt\n" + NEUTRAL)
    writer.close()
    assert first.quiet and first.complete == NEUTRAL
    assert not second.quiet and second.complete.startswith(b"saved checkpoint step=9")
    checkpoints = [item.event for item in read_all(run.path) if isinstance(item, TrainerEvent)]
    assert checkpoints == [Checkpoint(step=9, path="c.pt")]


def test_a_job_with_a_checkpoint_pattern_never_has_a_quiet_record(tmp_path: Path) -> None:
    run = claim_run(tmp_path, checkpoint_pattern=r"wrote (?P<step>\d+)")
    writer = OutputWriter(run.path)
    assert not writer.append(STDOUT, NEUTRAL + b"wrote 12\n").quiet
    assert not writer.append(STDOUT, NEUTRAL).quiet  # any line may match the job's pattern
    writer.close()
    assert record_flags(run.path) == [FLAG_LINES, FLAG_LINES]


def test_without_a_readable_spec_no_record_is_quiet(tmp_path: Path) -> None:
    run = claim_run(tmp_path, checkpoint_pattern=r"wrote (?P<step>\d+)")
    (run.path / "spec.json").write_text("{damaged", encoding="utf-8")
    writer = OutputWriter(run.path)
    assert not writer.append(STDOUT, NEUTRAL).quiet  # the job might have a pattern: never guess
    writer.close()


@pytest.mark.parametrize(
    ("stream", "flags"),
    [
        (ARENA, FLAG_LINES | FLAG_QUIET),
        (STDOUT, FLAG_CONTINUED | FLAG_QUIET),
        (STDOUT, FLAG_FINAL_PARTIAL | FLAG_QUIET),
        (STDOUT, 0x40),
    ],
)
def test_a_quiet_flag_no_writer_sets_is_damage(stream: int, flags: int) -> None:
    with pytest.raises(DamagedLog, match="unknown flags"):
        check_record(3, stream, flags, 10)


def test_check_record_gives_the_kind_without_the_quiet_flag() -> None:
    assert check_record(0, STDOUT, FLAG_LINES | FLAG_QUIET, 10) == FLAG_LINES
    assert check_record(0, STDOUT, FLAG_CONTINUED, 10) == FLAG_CONTINUED


# -- readers that trust it lose nothing ------------------------------------------------------------


def read_all(run_dir: Path) -> list[Item]:
    records = RunRecords(run_dir, EventParser)
    items: list[Item] = []

    class Keep:
        def take(self, item: Item) -> None:
            items.append(item)

    records.subscribe(Keep())
    while records.next_record < record_count(run_dir):
        records.read_new(wait=True)
    return items


def described(items: list[Item]) -> list[object]:
    """The items without their arrival times (two writers write at different moments)."""
    out: list[object] = []
    for item in items:
        if isinstance(item, TrainerEvent):
            out.append(item.event)
        elif isinstance(item, HealthPoint):
            out.append(("health", item.step, item.grad_norm))
        elif isinstance(item, AgentLine):
            out.append(("agent", item.text))
    return out


SPELLINGS = [
    "saved checkpoint step={n} path=ckpt/{n}.pt",
    "Saved CheckPoint step={n} path=ckpt/{n}.pt",
    "CHECKPOINT SAVED: step={n}",
    "checkPoint written at step {n}",
    "Saving model checkpoint to out/checkpoint-{n}",
]
LINES = st.one_of(
    st.just(NEUTRAL.decode().rstrip("\n")),
    st.builds("step {}/500 loss {:.3f}".format, st.integers(1, 500), st.floats(0.01, 9.0)),
    st.builds(lambda form, n: form.format(n=n), st.sampled_from(SPELLINGS), st.integers(1, 500)),
    st.builds('@arena {{"event": "checkpoint", "step": {}, "path": "c.pt"}}'.format, st.integers(1, 500)),
    st.builds('@arena {{"event": "progress", "step": {}, "total": 500}}'.format, st.integers(1, 500)),
    st.builds('@arena {{"event": "health", "gradNorm": 1.5, "step": {}}}'.format, st.integers(1, 500)),
    st.just("reach me at ops@example.org or check the pointer"),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz @/:=.", max_size=40),
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.tuples(LINES, st.integers(1, 400)), min_size=1, max_size=12),
    cuts=st.lists(st.integers(0, 1 << 16), max_size=12),
)
def test_readers_yield_the_same_items_with_quiet_records_as_without(
    lines: list[tuple[str, int]], cuts: list[int]
) -> None:
    """Every checkpoint the trainer printed is read back, quiet flag or not, however its writes
    were cut (a word split between two writes included); progress and health likewise."""
    text = "".join(f"{line}\n" * repeat for line, repeat in lines).encode()
    pieces = _cut(text, cuts)
    with tempfile.TemporaryDirectory() as folder:
        runs = []
        for quiet_allowed in (True, False):
            run = claim_run(Path(folder) / str(quiet_allowed))
            writer = OutputWriter(run.path)
            writer._quiet_allowed = quiet_allowed  # the same output, written without the verdict
            for piece in pieces:
                writer.append(STDOUT, piece)
            writer.finish_stream(STDOUT)
            writer.close()
            runs.append(described(read_all(run.path)))
        with_quiet, without = runs
    assert with_quiet == without
    every_checkpoint = [event for event in _each_line(text) if isinstance(event, Checkpoint)]
    assert [item for item in with_quiet if isinstance(item, Checkpoint)] == every_checkpoint


@settings(max_examples=examples(100), deadline=None)
@given(
    lines=st.lists(st.tuples(LINES, st.integers(1, 300)), min_size=1, max_size=10),
    tail=st.integers(64, 8192),
)
def test_the_agents_quiet_parse_finds_what_a_flood_parse_finds(
    lines: list[tuple[str, int]], tail: int
) -> None:
    data = "".join(f"{line}\n" * repeat for line, repeat in lines).encode()
    if not quiet_lines(data):
        return
    for pattern in (None, r"it (?P<step>\d+) loss (?P<loss>[0-9.]+)"):
        assert list(EventParser.for_patterns(pattern, None).parse_quiet(data, tail)) == list(
            EventParser.for_patterns(pattern, None).parse_flood(data, tail)
        )


def test_a_flood_of_quiet_records_still_gives_its_latest_progress(tmp_path: Path) -> None:
    run = claim_run(tmp_path)
    writer = OutputWriter(run.path)
    for step in range(1, 40):
        assert writer.append(STDOUT, NEUTRAL * 4000 + f"step {step}/39 loss 1.5\n".encode()).quiet
    writer.close()
    progress = [item.event for item in read_all(run.path) if isinstance(item, TrainerEvent)]
    assert progress and all(isinstance(event, Progress) for event in progress)
    assert progress[-1] == Progress(step=39, total=39, loss=1.5)


def _cut(text: bytes, cuts: list[int]) -> list[bytes]:
    """``text`` in pieces at the given offsets (modulo its length), as a pipe's reads cut it."""
    points = sorted({cut % (len(text) + 1) for cut in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if b > a]


def _each_line(text: bytes) -> list[object]:
    parser = EventParser()
    return [parser.parse(raw.decode()) for raw in text.splitlines()]


def test_the_record_layout_is_unchanged() -> None:
    """The flag lives in the flags byte: the index's record keeps its size and fields."""
    assert RECORD.size == struct.calcsize("<BBIQQd")


@settings(max_examples=examples(150), deadline=None)
@given(
    lengths=st.lists(st.integers(0, 9000), min_size=1, max_size=40),
    tail=st.integers(1, 20000),
    final=st.sampled_from(["step 77/100 loss 0.5", "x" * 9000 + " step 78/100 loss 0.4"]),
)
def test_reading_a_quiet_records_end_gives_what_its_whole_gives(
    lengths: list[int], tail: int, final: str
) -> None:
    """The part ``iter_records`` reads of a quiet record (its last ``tail`` bytes' lines and the
    line across that point, lines longer than the look back included) parses as the whole does."""
    lines = [f"step {n}/100 loss 1.0 " + "y" * length for n, length in enumerate(lengths, 1)] + [final]
    data = "".join(f"{line}\n" for line in lines).encode()
    with tempfile.TemporaryDirectory() as folder:
        run = claim_run(Path(folder))
        writer = OutputWriter(run.path)
        assert writer.append(STDOUT, data).quiet
        writer.close()
        ((_, _, flags, part, _),) = list(iter_records(run.path, 0, lambda index: tail))
    assert flags & FLAG_QUIET and data.endswith(part)
    assert list(EventParser().parse_quiet(part, tail)) == list(EventParser().parse_quiet(data, tail))


def test_a_quiet_record_the_log_does_not_hold_whole_ends_the_reading(tmp_path: Path) -> None:
    run = claim_run(tmp_path)
    writer = OutputWriter(run.path)
    writer.append(STDOUT, NEUTRAL * 2000)
    writer.close()
    log = run.path / "output.log"
    log.write_bytes(log.read_bytes()[:-100])  # cut short: damage, never a record read past the end
    assert list(iter_records(run.path, 0, lambda index: 4096)) == []
