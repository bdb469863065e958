"""``arena-ls --tcp`` against a neighbour that tries to hold it (issue 24, contract 7.2).

Real sockets against a real ``arena-ls --tcp``: a client that leaves in the
middle of a request, one that never initialises, one that floods an
unauthenticated first frame, another process reconnecting in a loop while
the owner connects, and a state folder that is a link out of the workspace.
Each asserts what the server does (answers, closes, bounded counts and
memory), never how long it took.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from tests.helpers.lsp import WAIT, job, make_workspace, wait_for
from tests.helpers.processes import kill_runs_of
from tests.protocol.raw import frame, request
from tests.protocol.test_tcp import Connection, TcpServer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX sockets and links")

MB = 1 << 20


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", [job("long", "--steps", "100000", "--interval", "0.05")])


@pytest.fixture
async def tcp(workspace: Path) -> AsyncIterator[TcpServer]:
    server = await TcpServer.start(workspace)
    yield server
    server.process.kill()
    await server.process.wait()
    kill_runs_of(workspace)  # the leavers' runs live on by design: end them here


def _token(tcp: TcpServer) -> str:
    return tcp.token_path.read_text().strip()


async def _owner_is_served(tcp: TcpServer, workspace: Path) -> Connection:
    """The owner connects once, initialises and gets arena/status answered (never refused)."""
    owner = await tcp.connect()
    answer = await owner.initialize(workspace, _token(tcp))
    assert answer is not None and "result" in answer, f"the owner was refused: {answer}"
    status = await owner.call("status", "arena/status", {})
    assert status is not None and "result" in status
    return owner


async def test_a_client_that_starts_a_run_and_leaves_at_once_frees_the_server(
    tcp: TcpServer, workspace: Path
) -> None:
    leaver = await tcp.connect()
    assert "result" in (await leaver.initialize(workspace, _token(tcp)) or {})
    leaver.send(request(7, "arena/start", {"id": "long"}))
    await leaver.writer.drain()
    leaver.close()
    # The very next connection is the client: never "already connected" for the leaver.
    owner = await _owner_is_served(tcp, workspace)
    # The answer to the leaver's start never reaches the owner, who did not send id 7:
    # every response up to the answer to a later request is the owner's own.
    owner.send(request("again", "arena/status", {}))
    ids = await _response_ids_until(owner, "again")
    assert set(ids) <= {"again"}, ids
    owner.close()


async def _response_ids_until(connection: Connection, last: str) -> list[object]:
    ids: list[object] = []
    while last not in ids:
        message = await asyncio.wait_for(connection.messages.next_message(), WAIT)
        assert message is not None, "the server closed the owner's connection"
        if "method" in message and "id" in message:
            connection.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
        elif "method" not in message:
            ids.append(message.get("id"))
    return ids


async def test_a_client_that_leaves_in_the_middle_of_each_request_frees_the_server(
    tcp: TcpServer, workspace: Path
) -> None:
    for method, params in [
        ("arena/status", {}),
        ("arena/start", {"id": "long"}),
        ("arena/stop", {"id": "long"}),
        ("arena/logs", {"runId": "nope"}),
        ("arena/metrics", {}),
    ]:
        leaver = await tcp.connect()
        assert "result" in (await leaver.initialize(workspace, _token(tcp)) or {})
        body = frame(request(1, method, params))
        leaver.writer.write(body[: len(body) // 2])  # half a frame, then gone
        await leaver.writer.drain()
        leaver.close()
        whole = await tcp.connect()
        assert "result" in (await whole.initialize(workspace, _token(tcp)) or {}), method
        whole.send(request(2, method, params))
        await whole.writer.drain()
        whole.close()  # a whole request, and gone before its answer
    (await _owner_is_served(tcp, workspace)).close()


async def test_a_connection_that_never_initialises_is_closed_and_does_not_hold_the_server(
    tcp: TcpServer, workspace: Path
) -> None:
    silent = await tcp.connect()
    talker = await tcp.connect()
    answer = await talker.call(1, "arena/status", {})
    assert answer is not None and answer["error"]["code"] == -32002
    # While both are open and have not shown the token, the owner is served.
    owner = await _owner_is_served(tcp, workspace)
    owner.close()
    assert await silent.closed_by_server()
    assert await talker.closed_by_server()


def _peak_rss(tcp: TcpServer) -> int:
    """The server's highest resident memory so far (Linux's VmHWM), in bytes."""
    for line in Path(f"/proc/{tcp.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return int(psutil.Process(tcp.process.pid).memory_info().rss)


async def test_an_unauthenticated_100_mb_first_frame_is_cut_off_at_1_mb_and_not_buffered(
    tcp: TcpServer, workspace: Path
) -> None:
    before = _peak_rss(tcp)
    flooder = await tcp.connect()
    flooder.writer.write(b"Content-Length: 100000000\r\n\r\n")
    chunk = b"x" * (256 << 10)
    sent = 0
    try:
        while sent < 100 * MB:
            flooder.writer.write(chunk)
            await asyncio.wait_for(flooder.writer.drain(), WAIT)
            sent += len(chunk)
    except ConnectionError:
        pass
    # Cut off near 1 MB (what the kernel's buffers hold on top), never read to the end.
    assert sent < 16 * MB, f"the server read {sent} bytes of an unauthenticated frame"
    assert await flooder.closed_by_server()
    assert _peak_rss(tcp) - before < 16 * MB  # before issue 24: +290 MB
    (await _owner_is_served(tcp, workspace)).close()


async def test_many_small_unauthenticated_requests_are_cut_off_at_1_mb(tcp: TcpServer) -> None:
    chatter = await tcp.connect()
    one = frame(request(1, "arena/status", {}))
    sent = 0
    try:
        while sent < 32 * MB:
            chatter.writer.write(one * 1000)
            await asyncio.wait_for(chatter.writer.drain(), WAIT)
            sent += len(one) * 1000
    except ConnectionError:
        pass
    assert sent < 16 * MB
    assert await chatter.closed_by_server()


RECONNECT_LOOP = r"""
import socket, sys, time
port, counter = int(sys.argv[1]), sys.argv[2]
count = 0
while True:
    try:
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"Content-Length: 40\r\n\r\n{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"x\"}")
        time.sleep(0.01)
        sock.close()
    except OSError:
        pass
    count += 1
    with open(counter, "w") as out:
        out.write(str(count))
"""


async def test_the_owner_is_served_while_another_process_reconnects_in_a_loop(
    tcp: TcpServer, workspace: Path, tmp_path: Path
) -> None:
    counter = tmp_path / "count"
    loop = await asyncio.create_subprocess_exec(
        sys.executable, "-c", RECONNECT_LOOP, str(tcp.port), str(counter)
    )
    try:

        def count() -> int:
            try:
                return int(counter.read_text() or 0)
            except (OSError, ValueError):
                return 0

        await wait_for(lambda: count() >= 20, what="the reconnect loop's first 20 connections")
        for _round in range(5):  # each time the first connection is the client
            owner = await _owner_is_served(tcp, workspace)
            owner.close()
        seen = count()
        # the loop went on beside the owner all along
        await wait_for(lambda: count() >= seen + 20, what="20 more reconnections")
    finally:
        loop.kill()
        await loop.wait()


async def test_the_token_is_never_written_through_a_state_folder_that_links_outside(
    workspace: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (workspace / ".aide").mkdir()
    os.symlink(outside, workspace / ".aide" / "training")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "arena_ls",
        "--tcp",
        "--port",
        "0",
        cwd=workspace,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), WAIT)
    assert process.returncode == 2
    assert b"outside the workspace" in stderr
    assert list(outside.iterdir()) == []
