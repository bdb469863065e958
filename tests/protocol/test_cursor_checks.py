"""Cursor checks: every cursor a read gives passes; each forged variant is refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import attrs
import pytest

from arena_ls.run.capture import LINE_LIMIT, STDERR, STDOUT, Cursor, InvalidCursor, OutputReader, OutputWriter


def write_log(folder: Path) -> None:
    writer = OutputWriter(folder)
    writer.append(STDOUT, b"".join(b"line %d\n" % i for i in range(40)))
    writer.append(STDERR, b"warning\n")
    for _ in range(3):  # an overlong line, in continuation records
        writer.append(STDOUT, b"x" * (LINE_LIMIT // 2 + 10))
        writer.append(STDERR, b"interleaved\n")
    writer.append(STDOUT, b"end of the long line\nafter\n")
    writer.close()


def every_cursor(folder: Path, limit: int) -> list[Cursor]:
    reader = OutputReader(folder)
    cursors = [reader.start()]
    while True:
        page = reader.read(cursors[-1], limit)
        if not page.lines:
            return cursors
        cursors.append(page.cursor)


@pytest.mark.parametrize("limit", [1, 3, 7, 1000])
def test_every_cursor_a_read_gives_passes_the_check(tmp_path: Path, limit: int) -> None:
    write_log(tmp_path)
    reader = OutputReader(tmp_path)
    cursors = every_cursor(tmp_path, limit)
    assert len(cursors) >= 2
    if limit == 1:  # some stop inside the overlong line: their open lines are checked too
        assert any(cursor.open_lines for cursor in cursors)
    for cursor in [*cursors, reader.tail_cursor(5), reader.tail_cursor(1000)]:
        reader.check_cursor(Cursor.decode(cursor.encode()))


def test_a_cursor_at_the_end_passes_while_the_trainer_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The records counted, then more appended before the check reads the last one: still valid."""
    write_log(tmp_path)
    reader = OutputReader(tmp_path)
    end = every_cursor(tmp_path, 1000)[-1]
    counted = reader.record_count()
    writer = OutputWriter(tmp_path)
    writer.append(STDOUT, b"appended meanwhile\n")
    writer.close()
    monkeypatch.setattr(reader, "record_count", lambda: counted)
    reader.check_cursor(Cursor.decode(end.encode()))


def test_forged_positions_are_refused(tmp_path: Path) -> None:
    write_log(tmp_path)
    reader = OutputReader(tmp_path)
    middle = every_cursor(tmp_path, 3)[2]
    assert middle.record < reader.record_count()
    forged = [
        attrs.evolve(middle, offset=middle.offset + 1),
        attrs.evolve(middle, seq=middle.seq + 100),
        attrs.evolve(middle, open_lines={0: (0, 0)}),
        attrs.evolve(middle, open_lines={0: (middle.record + 1, 0)}),
    ]
    for cursor in forged:
        with pytest.raises(InvalidCursor):
            reader.check_cursor(cursor)


@pytest.mark.parametrize(
    "payload",
    [
        {"r": -1, "o": 0, "s": 0, "p": {}},
        {"r": 2**70, "o": 0, "s": 0, "p": {}},
        {"r": 0, "o": 0, "s": 0, "p": {str(i): [0, 0] for i in range(4)}},
        {"r": 0, "o": 0, "s": 0, "p": {"7": [0, 0]}},
        {"r": 1.5, "o": 0, "s": 0, "p": {}},
        {"r": True, "o": 0, "s": 0, "p": {}},
        {"r": 0, "o": 0, "s": 0, "p": {"0": [0]}},
        {"r": 0, "o": 0, "s": 0, "p": []},
    ],
)
def test_forged_shapes_are_refused(payload: dict[str, object]) -> None:
    token = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")
    with pytest.raises(InvalidCursor):
        Cursor.decode(token)


def test_an_oversized_cursor_is_refused_before_it_is_decoded() -> None:
    with pytest.raises(InvalidCursor, match="too long"):
        Cursor.decode("A" * 1_000_000)
