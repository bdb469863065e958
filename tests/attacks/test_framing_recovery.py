"""Framing that recovers (issue 24 item 5, contract 6.1): raw bytes over real stdio.

A frame whose ``Content-Length`` claims more than it carries, followed at
once by a good frame, must not leave the reader waiting for bytes that never
come: the lost request is answered -32700 under its id, and the good one is
answered. A body that is not JSON is scanned for the next header; a bare
JSON request with no header is answered -32700 under its own id.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.helpers.lsp import job, make_workspace
from tests.protocol.raw import RawServer, frame, request


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", [job("lines", "--steps", "3")])


@pytest.fixture
async def server(workspace: Path) -> AsyncIterator[RawServer]:
    raw = await RawServer.start(workspace)
    answer = await raw.initialize(workspace)
    assert "result" in answer
    yield raw
    raw.kill()
    await raw.process.wait()


def _status(msg_id: int) -> bytes:
    return json.dumps(request(msg_id, "arena/status", {})).encode()


@pytest.mark.parametrize("extra", [200, 5000])
async def test_a_length_longer_than_the_body_followed_at_once_by_a_good_frame(
    server: RawServer, extra: int
) -> None:
    lost = _status(1)
    server.write(frame(lost, length=len(lost) + extra) + frame(_status(2)))
    good = await server.response(2)
    assert "result" in good
    broken = await server.response(1)
    assert broken["error"]["code"] == -32700
    assert "Content-Length" in broken["error"]["message"]
    assert "result" in await server.call(3, "arena/status", {})


@pytest.mark.parametrize("extra", [200, 5000])
async def test_a_body_that_is_not_json_and_stalls_before_a_good_frame(server: RawServer, extra: int) -> None:
    junk = b"this is not JSON at all"
    server.write(frame(junk, length=len(junk) + extra) + frame(_status(2)))
    assert "result" in await server.response(2)
    lost = await server.null_id_error()
    assert lost["error"]["code"] == -32700


async def test_a_body_that_is_not_json_with_a_frame_inside_its_length(server: RawServer) -> None:
    """The whole claimed length arrives, but the next frame began inside it: that frame is read."""
    junk = b"not JSON {{{"
    good = frame(_status(2))
    tail = frame(_status(3))
    server.write(frame(junk, length=len(junk) + len(good) + 10) + good + tail)
    assert "result" in await server.response(2)
    assert "result" in await server.response(3)
    assert (await server.null_id_error())["error"]["code"] == -32700


async def test_a_json_body_quoting_a_header_is_not_cut(server: RawServer) -> None:
    """A request whose own text holds ``Content-Length: 9`` is a request, not a resync point."""
    body = json.dumps(request(4, "arena/status", {"note": "Content-Length: 9\r\n\r\n" + "x" * 300})).encode()
    server.write(frame(body))
    answer = await server.response(4)
    assert "result" in answer or answer["error"]["code"] == -32602


@pytest.mark.parametrize("ending", [b"\r\n", b"\n", b""])
async def test_a_bare_json_request_with_no_header_gets_32700_under_its_id(
    server: RawServer, ending: bytes
) -> None:
    server.write(_status(5) + ending)
    answer = await server.response(5)
    assert answer["error"]["code"] == -32700
    assert "Content-Length" in answer["error"]["message"]
    assert "result" in await server.call(6, "arena/status", {})
    assert server.null_id_errors == []
