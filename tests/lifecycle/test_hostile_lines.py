"""No line a trainer prints can fail its run (contract 7.1): the event parser, attacked.

A value outside what the contract allows (a number beyond 10^15, NaN where a
step is meant, an integer no float can hold) makes that one ``@arena`` line an
ordinary log line; the other events of the same write are kept. Hypothesis
throws huge integers, floats, NaN, deep JSON, invalid UTF-8 and 10 MB lines at
the parsers; they never raise, and whatever they accept is in range.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arena_ls.insights.parse import health_in_chunk, parse_health
from arena_ls.run.trainer_announcements import (
    MAX_NUMBER,
    Checkpoint,
    Eval,
    EventParser,
    Progress,
    parse_arena_line,
)
from tests.helpers.fuzzing import examples

HUGE = int("9" * 400)
REAL_CHECKPOINT = b'@arena {"event": "checkpoint", "step": 500, "path": "ckpt.pt"}\n'

HOSTILE = [
    '{"event": "progress", "step": %d, "total": 2000}'.replace("%d", str(HUGE)),
    '{"event": "progress", "step": 10, "total": %d}'.replace("%d", str(HUGE)),
    '{"event": "progress", "step": 10, "loss": %d}'.replace("%d", str(HUGE)),
    '{"event": "progress", "step": 10, "lr": 1e300}',
    '{"event": "progress", "step": 1e300}',
    '{"event": "progress", "step": 1e400}',
    '{"event": "progress", "step": 1000000000000001}',
    '{"event": "progress", "step": NaN, "loss": 1.0}',
    '{"event": "progress", "step": Infinity}',
    '{"event": "progress", "step": -Infinity}',
    '{"event": "checkpoint", "step": 1e300, "path": "ckpt.pt"}',
    '{"event": "checkpoint", "step": %d, "path": "ckpt.pt"}'.replace("%d", str(HUGE)),
    '{"event": "checkpoint", "step": NaN, "path": "ckpt.pt"}',
    '{"event": "checkpoint", "step": 5, "path": "ckpt\\u0000.pt"}',
    '{"event": "checkpoint", "step": 5, "path": "' + "x" * 5000 + '"}',
    '{"event": "eval", "step": %d, "loss": 1.0}'.replace("%d", str(HUGE)),
    '{"event": "eval", "step": 5, "loss": -1e16}',
    "[" * 100_000 + "]" * 100_000,
    '{"a": ' * 50_000 + "1" + "}" * 50_000,
    '{"event": "progress", "step": 1%s}' % ("0" * 5000),
]


@pytest.mark.parametrize("payload", HOSTILE, ids=lambda text: text[:60])
def test_an_out_of_range_announcement_is_an_ordinary_line(payload: str) -> None:
    parser = EventParser()
    assert parse_arena_line("@arena " + payload) is None
    assert parser.parse("@arena " + payload) is None


def test_values_in_range_are_still_read() -> None:
    parser = EventParser()
    top = MAX_NUMBER
    assert parser.parse(f'@arena {{"event": "progress", "step": {top}, "total": {top}}}') == Progress(
        top, top
    )
    nan_loss = parser.parse('@arena {"event": "progress", "step": 3, "loss": NaN}')
    assert isinstance(nan_loss, Progress) and nan_loss.loss is not None and math.isnan(nan_loss.loss)
    bad_loss = parser.parse('@arena {"event": "progress", "step": 3, "loss": Infinity}')
    assert isinstance(bad_loss, Progress) and bad_loss.loss == math.inf, "an infinite loss is news, kept"
    assert parser.parse('@arena {"event": "eval", "step": 4, "loss": 1.5}') == Eval(4, 1.5)
    assert parser.parse("step 7/10 loss inf") == Progress(7, 10, math.inf)


@pytest.mark.parametrize(
    "line",
    [
        "step 1/" + "9" * 400 + " loss 2.3",
        "step " + "9" * 400 + " loss 2.3",
        "step 12/100 loss 1e999",
        "step 12/100 loss 1e300",
        "saved checkpoint to ckpt.pt at step " + "9" * 400,
        "Saving model checkpoint to out/checkpoint-" + "9" * 30,
    ],
)
def test_a_plain_line_with_an_out_of_range_number_is_no_event(line: str) -> None:
    assert EventParser().parse(line) is None


def test_the_checkpoint_of_the_same_write_is_kept() -> None:
    """The failure of main: one bad line cost every event of its write (the checkpoint too)."""
    hostile = b"".join(b"@arena " + text.encode() + b"\n" for text in HOSTILE)
    chunk = hostile + REAL_CHECKPOINT + hostile + b"@arena \xff\xfe{not utf-8}\n"
    for parse in (EventParser().parse_chunk, EventParser().parse_flood):
        events = list(parse(chunk))
        assert events == [Checkpoint(500, "ckpt.pt")], parse


def test_a_1e300_checkpoint_never_becomes_a_start_step() -> None:
    parser = EventParser()
    events = list(parser.parse_chunk(b'@arena {"event": "checkpoint", "step": 1e300, "path": "c.pt"}\n'))
    assert events == []


def test_health_lines_are_bounded_too() -> None:
    assert parse_health('@arena {"event": "health", "gradNorm": 1e300}', 0.0) is None
    assert (
        parse_health('@arena {"event": "health", "gradNorm": 2.0, "step": %d}'.replace("%d", str(HUGE)), 0.0)
        is None
    )
    assert parse_health('@arena {"event": "health", "gradNorm": 2.0, "step": 1e300}', 0.0) is None
    point = parse_health('@arena {"event": "health", "gradNorm": 2.0, "step": 9}', 0.0)
    assert point is not None and point.step == 9 and point.grad_norm == 2.0


def test_a_ten_megabyte_line_is_read_without_raising() -> None:
    parser = EventParser()
    long_progress = b"step 5/10 " + b"step 1 / " * (10 << 17) + b"\n"
    long_arena = b'@arena {"event": "progress", "step": 6, "pad": "' + b"x" * (10 << 20) + b'"}\n'
    events = list(parser.parse_chunk(long_progress + long_arena + REAL_CHECKPOINT))
    assert Checkpoint(500, "ckpt.pt") in events
    assert (
        list(health_in_chunk(b'@arena {"event": "health", "pad": "' + b"y" * (10 << 20) + b'"}\n', 0.0)) == []
    )


# ----------------------------------------------------------------------------- fuzzing

NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=10**14, max_value=10**400),
    st.integers(min_value=-(10**400), max_value=-(10**14)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, -1e300, 1e15, 1e15 + 2, 0.5, -0.0]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=20))
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(["event", "step", "total", "loss", "lr", "path", "gradNorm", "clipFraction"])
EVENTS = st.sampled_from(["progress", "checkpoint", "eval", "health", "other"])


@st.composite
def announcements(draw: st.DrawFn) -> dict[str, Any]:
    payload: dict[str, Any] = draw(st.dictionaries(KEYS, JSON, max_size=6))
    payload["event"] = draw(EVENTS)
    return payload


def _dumps(payload: Any) -> str:
    try:
        return json.dumps(payload)  # NaN and Infinity as the literals Python's json writes
    except (ValueError, RecursionError):
        return "{}"


def _check_event(event: object) -> None:
    if event is None:
        return
    assert isinstance(event, (Progress, Checkpoint, Eval))
    assert 0 <= event.step <= MAX_NUMBER
    if isinstance(event, Progress) and event.total is not None:
        assert 0 <= event.total <= MAX_NUMBER
    for value in (getattr(event, "loss", None), getattr(event, "lr", None)):
        assert value is None or not math.isfinite(value) or abs(value) <= MAX_NUMBER


FUZZ = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(announcements())
def test_fuzz_announcements_never_raise_and_stay_in_range(payload: dict[str, Any]) -> None:
    line = "@arena " + _dumps(payload)
    _check_event(parse_arena_line(line))
    _check_event(EventParser().parse(line))
    point = parse_health(line, 0.0)
    assert point is None or point.step is None or 0 <= point.step <= MAX_NUMBER


@FUZZ
@given(
    st.lists(
        st.one_of(st.binary(max_size=200), announcements().map(lambda p: ("@arena " + _dumps(p)).encode()))
    )
)
def test_fuzz_chunks_never_raise_and_keep_the_checkpoint(lines: list[bytes]) -> None:
    chunk = b"\n".join(lines) + b"\n" + REAL_CHECKPOINT
    for parser in (EventParser(), EventParser.for_patterns(r"it (?P<step>\d+) of (?P<total>\d+)", None)):
        events = list(parser.parse_chunk(chunk))
        for event in events:
            _check_event(event)
        assert events[-1] == Checkpoint(500, "ckpt.pt")
    flood = list(EventParser().parse_flood(chunk, tail_bytes=64))
    assert flood[-1] == Checkpoint(500, "ckpt.pt")
    list(health_in_chunk(chunk, 0.0))


@FUZZ
@given(st.binary(max_size=400))
def test_fuzz_invalid_utf8_after_the_prefix(data: bytes) -> None:
    chunk = b"@arena " + data + b'\n@arena {"event": "progress", "step": ' + data + b"}\n" + REAL_CHECKPOINT
    events = list(EventParser().parse_chunk(chunk))
    assert events[-1] == Checkpoint(500, "ckpt.pt")


@settings(max_examples=examples(40), deadline=None)
@given(
    st.integers(min_value=1, max_value=200_000), st.sampled_from(["[", '{"a":', '{"event": "progress", "x":'])
)
def test_fuzz_deep_json(depth: int, opener: str) -> None:
    closer = {"[": "]", '{"a":': "}", '{"event": "progress", "x":': "}"}[opener]
    line = "@arena " + opener * depth + "1" + closer * depth
    assert EventParser().parse(line) is None
    assert parse_health(line, 0.0) is None
