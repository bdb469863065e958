"""The announcements' one shared JSON decoder (``trainer_announcements.load_bounded_json``) reads
each line as ``json.loads`` with the bounded number hooks would, from any number of threads."""

from __future__ import annotations

import json
import math
import threading
from typing import Any

import pytest

from arena_ls.run import trainer_announcements as announcements
from arena_ls.run.trainer_announcements import BEYOND, load_bounded_json

LINES = [
    '{"event": "progress", "step": 12, "loss": 1.25}',
    '{"event": "checkpoint", "step": 7, "path": "c/7.pt", "bytes": 123456789}',
    '{"step": ' + "9" * 21 + "}",
    '{"loss": 1e400, "lr": -1e400}',
    '{"loss": NaN, "x": Infinity}',
    '[1, 2.5, {"a": [' + "3" * 40 + "]}]",
    '"just a string"',
    "  {}  ",
]
BAD = ["", "{", '{"a": 1} trailing', "\ufeff{}", '{"a": 01}', "[" * 5000]


def _old_loads(text: str) -> Any:
    return json.loads(
        text,
        parse_int=announcements._bounded_int,
        parse_float=announcements._bounded_float,
    )


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a is b if a is BEYOND or b is BEYOND else (type(a) is type(b) and a == b)


@pytest.mark.parametrize("text", LINES)
def test_a_line_reads_as_json_loads_with_the_bounds_reads_it(text: str) -> None:
    assert _same(load_bounded_json(text), _old_loads(text))


def test_numbers_too_large_read_as_beyond() -> None:
    assert load_bounded_json('{"step": ' + "9" * 21 + "}")["step"] is BEYOND
    assert load_bounded_json('{"step": ' + "9" * 20 + "}")["step"] == int("9" * 20)
    assert load_bounded_json('{"loss": 1e400}')["loss"] is BEYOND


@pytest.mark.parametrize("text", BAD)
def test_what_json_loads_refuses_is_refused(text: str) -> None:
    with pytest.raises((ValueError, RecursionError)):
        _old_loads(text)
    with pytest.raises((ValueError, RecursionError)):
        load_bounded_json(text)


def test_threads_sharing_the_decoder_each_read_their_own_lines() -> None:
    expected = [_old_loads(text) for text in LINES]
    failures: list[str] = []

    def read_many(offset: int) -> None:
        for round_ in range(400):
            index = (offset + round_) % len(LINES)
            if not _same(load_bounded_json(LINES[index]), expected[index]):
                failures.append(LINES[index])

    threads = [threading.Thread(target=read_many, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
