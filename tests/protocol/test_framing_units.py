"""The frame reader on exact byte streams: every broken frame is answered and the stream resynchronises."""

from __future__ import annotations

import json
from typing import Any

import pytest

from arena_ls.protocol.rpc import framing
from arena_ls.protocol.rpc.framing import Broken, FrameReader, Message
from tests.protocol.raw import frame, request

SILENCE = object()


class Script:
    """Chunks handed out in order; SILENCE raises the reader's idle timeout, the end is EOF."""

    def __init__(self, *chunks: Any) -> None:
        self.chunks = list(chunks)

    async def read(self, timeout: float | None) -> bytes:
        if not self.chunks:
            return b""
        chunk = self.chunks.pop(0)
        if chunk is SILENCE:
            assert timeout is not None, "the reader waited without a deadline while a reply was due"
            raise TimeoutError
        assert isinstance(chunk, bytes)
        return chunk


async def read_all(*chunks: Any) -> tuple[list[Any], FrameReader]:
    reader = FrameReader(Script(*chunks))
    return [event async for event in reader.events()], reader


def body(msg_id: int) -> bytes:
    return json.dumps(request(msg_id, "arena/status", {})).encode()


def ids(events: list[Any]) -> list[Any]:
    return [e.value["id"] if isinstance(e, Message) else ("broken", e.request_id) for e in events]


async def test_good_frames_in_one_chunk_and_split_byte_by_byte() -> None:
    data = frame(body(1)) + frame(body(2))
    events, reader = await read_all(data)
    assert ids(events) == [1, 2]
    events, reader = await read_all(*[data[i : i + 1] for i in range(len(data))])
    assert ids(events) == [1, 2] and reader.truncated is None


async def test_lowercase_header_and_lf_only_lines_are_read() -> None:
    lower = b"content-length: %d\r\n\r\n" % len(body(1)) + body(1)
    lf_only = b"Content-Length: %d\n\n" % len(body(2)) + body(2)
    events, _ = await read_all(lower + lf_only + frame(body(3)))
    assert ids(events) == [1, 2, 3]


@pytest.mark.parametrize("value", [b"-5", b"abc", b"0", b"", b"99999999999999"])
async def test_bad_content_length_is_answered_under_the_request_id_and_resyncs(value: bytes) -> None:
    events, _ = await read_all(b"Content-Length: " + value + b"\r\n\r\n" + body(7) + frame(body(8)))
    assert ids(events) == [("broken", 7), 8]


async def test_length_one_short_answers_the_request_and_resyncs() -> None:
    events, _ = await read_all(frame(body(1), length=len(body(1)) - 1) + frame(body(2)))
    assert ids(events) == [("broken", 1), 2]


async def test_length_one_long_then_the_next_frame_reads_the_next_frame() -> None:
    events, _ = await read_all(frame(body(1), length=len(body(1)) + 1) + frame(body(2)))
    assert ids(events) == [("broken", 1), 2]


async def test_length_long_then_silence_is_answered_without_waiting_forever() -> None:
    events, _ = await read_all(frame(body(1), length=len(body(1)) + 10), SILENCE, frame(body(2)))
    assert ids(events) == [("broken", 1), 2]


async def test_a_slow_client_inside_a_body_is_waited_for() -> None:
    data = frame(body(1))
    events, _ = await read_all(data[:30], SILENCE, SILENCE, data[30:])
    assert ids(events) == [1]


async def test_garbage_line_then_a_frame() -> None:
    events, _ = await read_all(b"hello there\r\n" + frame(body(4)))
    assert ids(events) == [("broken", None), 4]


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'{"jsonrpc": "2.0", "id": 5, "method": ', "not JSON"),
        (b"\xff\xfe{}", "UTF-8"),
        (b'{"jsonrpc": "2.0", "id": 5, "x": NaN}', "NaN is not JSON"),
        (b"[" * 100_000, "not JSON"),
    ],
)
async def test_bodies_that_are_not_json(payload: bytes, reason: str) -> None:
    events, _ = await read_all(frame(payload) + frame(body(9)))
    assert isinstance(events[0], Broken) and reason in events[0].reason
    assert ids(events)[-1] == 9


async def test_the_id_of_a_damaged_body_is_its_top_level_id() -> None:
    damaged = b'{"jsonrpc": "2.0", "method": "arena/start", "params": {"id": "job"}, "id": 12, '
    events, _ = await read_all(frame(damaged))
    assert ids(events) == [("broken", 12)]


async def test_the_stream_ending_inside_a_frame_is_reported() -> None:
    events, reader = await read_all(frame(body(1))[:-3])
    assert events == [] and reader.truncated is not None and "body" in reader.truncated
    events, reader = await read_all(b"Content-Le")
    assert reader.truncated is not None and "header" in reader.truncated


async def test_a_clean_end_is_not_a_truncation() -> None:
    events, reader = await read_all(frame(body(1)), b"\r\n")
    assert ids(events) == [1] and reader.truncated is None


async def test_an_overlong_header_line_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "MAX_HEADER_LINE", 64)
    events, _ = await read_all(b"X" * 500, frame(body(3)))
    assert ids(events)[-1] == 3 and isinstance(events[0], Broken)


@pytest.mark.parametrize("extra", [200, 5000])
async def test_a_stalled_over_long_body_is_cut_at_the_next_header_that_came(extra: int) -> None:
    """Issue 24: the reader waited forever for bytes that never came."""
    lost = body(1)
    events, reader = await read_all(frame(lost, length=len(lost) + extra) + frame(body(2)), SILENCE)
    assert ids(events) == [("broken", 1), 2]
    assert reader.truncated is None


async def test_a_slow_body_that_quotes_a_header_in_a_string_is_waited_for() -> None:
    text = json.dumps(request(3, "arena/status", {"note": "Content-Length: 9\r\n\r\n{}"})).encode()
    cut = text.index(b"Content-Length") + 10
    events, _ = await read_all(frame(text)[: len(frame(text)) - len(text) + cut], SILENCE, text[cut:])
    assert ids(events) == [3]


async def test_a_stalled_body_cut_inside_a_string_is_cut_at_the_next_header() -> None:
    """An unterminated string then a good frame: a header line is never part of a JSON body."""
    text = b'{"jsonrpc": "2.0", "id": 4, "method": "arena/status", "params": {"a": "abc'
    head = b"Content-Length: %d\r\n\r\n" % (len(text) + 300)
    events, _ = await read_all(head + text + frame(body(5)), SILENCE)
    assert ids(events) == [("broken", 4), 5]


@pytest.mark.parametrize("ending", [b"\r\n", b""])
async def test_a_bare_message_without_a_header_is_broken_under_its_own_id(ending: bytes) -> None:
    events, _ = await read_all(body(5) + ending, SILENCE, frame(body(6)))
    assert ids(events) == [("broken", 5), 6]
