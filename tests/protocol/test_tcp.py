"""``arena-ls --tcp``: a token, one client at a time, and an intruder that gets nothing (contract 6.1)."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lsp import WAIT, job, make_workspace
from tests.protocol.raw import MessageReader, frame, request

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="owner-only file modes are POSIX")


class TcpServer:
    def __init__(self, process: asyncio.subprocess.Process, port: int, token_path: Path) -> None:
        self.process = process
        self.port = port
        self.token_path = token_path

    @classmethod
    async def start(cls, root: Path, *args: str) -> TcpServer:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "arena_ls",
            "--tcp",
            "--port",
            "0",
            *args,
            cwd=root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "ARENA_LS_LOG": "INFO"},
        )
        assert process.stderr is not None
        port = token_path = None

        async def banner() -> None:
            nonlocal port, token_path
            while port is None or token_path is None:
                line = (await process.stderr.readline()).decode()  # type: ignore[union-attr]
                assert line, "the server ended before serving"
                if match := re.search(r"TCP token in (\S+)", line):
                    token_path = Path(match.group(1))
                if match := re.search(r"serving TCP on 127\.0\.0\.1:(\d+)", line):
                    port = int(match.group(1))

        await asyncio.wait_for(banner(), WAIT)
        assert port is not None and token_path is not None
        return cls(process, port, token_path)

    async def logged(self, text: str) -> str:
        """The next line of the server's log (stderr) that contains ``text``; the lines before it
        are passed over. Fails when the server ends first, or after ``WAIT``."""
        assert self.process.stderr is not None

        async def read() -> str:
            while True:
                line = (await self.process.stderr.readline()).decode()  # type: ignore[union-attr]
                assert line, f"the server ended before logging {text!r}"
                if text in line:
                    return line

        try:
            return await asyncio.wait_for(read(), WAIT)
        except asyncio.TimeoutError:
            raise AssertionError(f"the server did not log {text!r} within {WAIT:.0f} s") from None

    async def connect(self) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        return Connection(reader, writer)


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.messages = MessageReader(reader)
        self.writer = writer

    def send(self, message: dict[str, Any]) -> None:
        self.writer.write(frame(message))

    async def answer(self, msg_id: Any) -> dict[str, Any] | None:
        """The response to ``msg_id``; None when the server closed the connection first."""

        async def wait() -> dict[str, Any] | None:
            while True:
                try:
                    message = await self.messages.next_message()
                except ConnectionError:  # closed without reading what we sent: a reset
                    return None
                if message is None:
                    return None
                if "method" in message and "id" in message:
                    self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
                elif message.get("id") == msg_id and "method" not in message:
                    return message

        return await asyncio.wait_for(wait(), WAIT)

    async def call(self, msg_id: Any, method: str, params: Any = None) -> dict[str, Any] | None:
        self.send(request(msg_id, method, params))
        return await self.answer(msg_id)

    async def initialize(self, root: Path, token: str | None) -> dict[str, Any] | None:
        options: dict[str, Any] = {"python": sys.executable}
        if token is not None:
            options["token"] = token
        init = {
            "processId": None,
            "rootUri": root.as_uri(),
            "capabilities": {},
            "initializationOptions": options,
        }
        answer = await self.call("init", "initialize", init)
        if answer is not None and "result" in answer:
            self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return answer

    async def closed_by_server(self) -> bool:
        try:
            return await asyncio.wait_for(self.messages.stream.read(), WAIT) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", [job("lines", "--steps", "5")])


@pytest.fixture
async def tcp(workspace: Path) -> AsyncIterator[TcpServer]:
    server = await TcpServer.start(workspace)
    yield server
    server.process.kill()
    await server.process.wait()


async def test_the_token_is_a_fresh_owner_only_file_in_the_state_folder(
    tcp: TcpServer, workspace: Path
) -> None:
    assert tcp.token_path == workspace / ".aide" / "training" / "tcp-token"
    mode = stat.S_IMODE(tcp.token_path.stat().st_mode)
    assert mode == 0o600
    assert len(tcp.token_path.read_text().strip()) >= 32


async def test_an_intruder_without_the_token_runs_nothing_and_is_closed(
    tcp: TcpServer, workspace: Path
) -> None:
    intruder = await tcp.connect()
    answer = await intruder.call(1, "arena/start", {"id": "lines"})
    assert answer is not None and answer["error"]["code"] == -32002
    refused = await intruder.initialize(workspace, "not-the-token")
    assert refused is not None and refused["error"]["data"]["reason"] == "token-required"
    assert await intruder.closed_by_server()
    assert not (workspace / ".aide" / "training" / "runs").exists()
    # The server is still there for the owner.
    owner = await tcp.connect()
    answer = await owner.initialize(workspace, tcp.token_path.read_text().strip())
    assert answer is not None and "result" in answer
    status = await owner.call(2, "arena/status", {})
    assert status is not None and status["result"]["runs"] == []
    owner.close()


async def test_an_initialize_without_any_token_is_closed(tcp: TcpServer, workspace: Path) -> None:
    intruder = await tcp.connect()
    answer = await intruder.initialize(workspace, None)
    assert answer is not None and "error" in answer
    assert await intruder.closed_by_server()


async def test_one_client_at_a_time_and_the_next_one_after_a_disconnect(
    tcp: TcpServer, workspace: Path
) -> None:
    token = tcp.token_path.read_text().strip()
    first = await tcp.connect()
    assert (await first.initialize(workspace, token) or {}).get("result") is not None
    second = await tcp.connect()
    assert await second.closed_by_server()
    status = await first.call(1, "arena/status", {})
    assert status is not None and "result" in status
    first.close()
    # The server keeps serving: the next client is served once the server has let the first go.
    await tcp.logged("disconnected; waiting for the next one")
    third = await tcp.connect()
    answer = await third.initialize(workspace, token)
    assert answer is not None and "result" in answer, answer
    status = await third.call(2, "arena/status", {})
    assert status is not None and "result" in status
    assert tcp.process.returncode is None
    third.close()


async def test_a_token_file_given_on_the_command_line(workspace: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-of-more-than-sixteen-chars\n")
    server = await TcpServer.start(workspace, "--token-file", str(token_file))
    try:
        assert server.token_path == token_file
        client = await server.connect()
        answer = await client.initialize(workspace, "a-token-of-more-than-sixteen-chars")
        assert answer is not None and "result" in answer
        client.close()
    finally:
        server.process.kill()
        await server.process.wait()
