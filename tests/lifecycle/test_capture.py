"""The captured-output format: whole lines, seq numbering, cursors that resume anywhere."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from arena_ls.run.capture import (
    ARENA,
    LINE_LIMIT,
    STDERR,
    STDOUT,
    Cursor,
    OutputReader,
    OutputWriter,
    clean_text,
    clean_texts,
)
from arena_ls.run.capture_records import iter_all_lines


def read_all(folder: Path, limit: int) -> list[tuple[int, str, str]]:
    reader = OutputReader(folder)
    cursor = reader.start()
    lines = []
    while True:
        page = reader.read(Cursor.decode(cursor.encode()), limit)
        lines += [(line.seq, line.stream, line.text) for line in page.lines]
        if not page.lines:
            return lines
        cursor = page.cursor


def test_lines_split_across_chunks_and_streams_keep_their_order(tmp_path: Path) -> None:
    writer = OutputWriter(tmp_path)
    writer.append(STDOUT, b"one\ntw")
    writer.append(STDERR, b"err 1\n")
    writer.append(STDOUT, b"o\nthree\n")
    writer.append_line(ARENA, "job exited with code 0")
    writer.append(STDOUT, b"no newline at the end")
    writer.finish_stream(STDOUT)
    writer.close()
    expected = [
        (0, "stdout", "one"),
        (1, "stderr", "err 1"),
        (2, "stdout", "two"),
        (3, "stdout", "three"),
        (4, "arena", "job exited with code 0"),
        (5, "stdout", "no newline at the end"),
    ]
    for limit in (1, 2, 3, 100):
        assert read_all(tmp_path, limit) == expected


def test_an_overlong_line_is_reassembled_even_from_a_cursor_inside_it(tmp_path: Path) -> None:
    writer = OutputWriter(tmp_path)
    writer.append(STDOUT, b"before\n")
    for _ in range(3):
        writer.append(STDOUT, b"x" * LINE_LIMIT)
        writer.append(STDERR, b"interleaved\n")
    writer.append(STDOUT, b"tail\nafter\n")
    writer.close()
    texts = [text for _, _, text in read_all(tmp_path, 1)]
    assert texts[0] == "before" and texts[1:4] == ["interleaved"] * 3
    assert texts[4].startswith("x" * LINE_LIMIT)
    assert f"line cut: {2 * LINE_LIMIT + 4} more bytes" in texts[4]
    assert texts[5] == "after"
    assert [line.seq for line in iter_all_lines(tmp_path)] == list(range(6))


def test_a_restarted_writer_continues_the_numbering(tmp_path: Path) -> None:
    first = OutputWriter(tmp_path)
    first.append(STDOUT, b"a\nb\n")
    first.close()
    second = OutputWriter(tmp_path)
    assert second.lines_written == 2
    second.append(STDOUT, b"c\n")
    second.close()
    assert [line.text for line in iter_all_lines(tmp_path)] == ["a", "b", "c"]


def test_tail_cursor_starts_near_the_end(tmp_path: Path) -> None:
    writer = OutputWriter(tmp_path)
    for i in range(100):
        writer.append(STDOUT, f"line {i}\n".encode())
    writer.close()
    reader = OutputReader(tmp_path)
    page = reader.read(reader.tail_cursor(10), 1000)
    texts = [line.text for line in page.lines]
    assert texts == [f"line {i}" for i in range(90, 100)]


@pytest.mark.parametrize("keep", [1, 5, 150, 1999, 2000, 5000])
def test_tail_cursor_lands_on_the_line_inside_a_large_record(tmp_path: Path, keep: int) -> None:
    writer = OutputWriter(tmp_path)
    writer.append(STDOUT, b"".join(f"a {i}\n".encode() for i in range(1000)))
    writer.append(STDERR, b"between\n")
    writer.append(STDOUT, b"".join(f"b {i}\n".encode() for i in range(999)))
    writer.close()
    everything = [line.text for line in iter_all_lines(tmp_path)]
    reader = OutputReader(tmp_path)
    cursor = reader.tail_cursor(keep)
    page = reader.read(Cursor.decode(cursor.encode()), 10_000)
    assert [line.text for line in page.lines] == everything[-keep:]
    assert [line.seq for line in page.lines] == list(range(max(0, 2000 - keep), 2000))


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"\x1b[1;32mgreen\x1b[0m", "green"),
        (b"10%\r50%\r100%", "100%"),
        (b"windows line\r", "windows line"),
        (b"bad \xff byte", "bad \ufffd byte"),
        (b"bell\x07 and nul\x00", "bell and nul"),
    ],
)
def test_clean_text(raw: bytes, text: str) -> None:
    assert clean_text(raw) == text


@pytest.mark.parametrize("token", ["", "not base64!", "e30", "eyJyIjogLTF9"])
def test_bad_cursors_are_refused(token: str) -> None:
    with pytest.raises(ValueError):
        Cursor.decode(token)


def test_cleaning_many_lines_at_once_gives_what_cleaning_each_gives() -> None:
    pieces = [
        b"plain",
        b"",
        b"bad \xff byte",
        b"cut \xe2\x82",
        b"tab\there",
        b"nul\x00 bell\x07",
        b"\x1b[1mbold\x1b[0m",
        b"10%\r100%",
        b"x" * (LINE_LIMIT + 5),
        "é ünïcode".encode(),
    ]
    generator = random.Random(7)
    for _ in range(3000):
        raws = [generator.choice(pieces) for _ in range(generator.randint(0, 6))]
        raws += [bytes(generator.randrange(256) for _ in range(8)).replace(b"\n", b"")]
        assert clean_texts(raws) == [clean_text(raw) for raw in raws], raws
