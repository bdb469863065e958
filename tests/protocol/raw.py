"""A raw JSON-RPC client for attack tests: it writes any bytes, and reads frames back.

pytest-lsp cannot send a broken frame or an object id; this client can.
It answers the server's own requests (configuration, progress) with null.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.helpers.lsp import WAIT


def frame(
    body: bytes | dict[str, Any], *, length: int | None = None, header: str = "Content-Length"
) -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    size = len(data) if length is None else length
    return f"{header}: {size}\r\n\r\n".encode() + data


def request(msg_id: Any, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


class MessageReader:
    """Frames from a stream; notifications and responses kept apart."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.stream = stream
        self.responses: list[dict[str, Any]] = []
        self.server_requests: list[dict[str, Any]] = []

    async def next_message(self) -> dict[str, Any] | None:
        length = None
        while True:
            line = await self.stream.readline()
            if not line:
                return None
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.decode().partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        assert length is not None
        message: dict[str, Any] = json.loads(await self.stream.readexactly(length))
        return message


class RawServer:
    """``arena-ls`` over stdio, driven byte by byte."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        assert process.stdout is not None
        self.reader = MessageReader(process.stdout)
        self.responses: dict[Any, dict[str, Any]] = {}
        self.null_id_errors: list[dict[str, Any]] = []
        self.notifications: list[dict[str, Any]] = []

    @classmethod
    async def start(cls, root: Path, *args: str) -> RawServer:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "arena_ls",
            *args,
            cwd=root,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "ARENA_LS_LOG": "INFO"},
            limit=1 << 24,
        )
        return cls(process)

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)

    def send(self, body: bytes | dict[str, Any], **options: Any) -> None:
        self.write(frame(body, **options))

    async def _pump_one(self) -> bool:
        message = await self.reader.next_message()
        if message is None:
            return False
        if "method" in message and "id" in message:
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": None})
        elif "method" in message:
            self.notifications.append(message)
        elif message.get("id") is None:
            self.null_id_errors.append(message)
        else:
            self.responses[message["id"]] = message
        return True

    async def response(self, msg_id: Any, timeout: float = WAIT) -> dict[str, Any]:
        async def wait() -> dict[str, Any]:
            while msg_id not in self.responses:
                if not await self._pump_one():
                    raise AssertionError(f"the server closed its output before answering {msg_id!r}")
            return self.responses.pop(msg_id)

        return await asyncio.wait_for(wait(), timeout)

    async def null_id_error(self, timeout: float = WAIT) -> dict[str, Any]:
        async def wait() -> dict[str, Any]:
            while not self.null_id_errors:
                if not await self._pump_one():
                    raise AssertionError("the server closed its output before answering")
            return self.null_id_errors.pop(0)

        return await asyncio.wait_for(wait(), timeout)

    async def call(self, msg_id: Any, method: str, params: Any = None) -> dict[str, Any]:
        self.send(request(msg_id, method, params))
        return await self.response(msg_id)

    async def initialize(self, root: Path, **options: Any) -> dict[str, Any]:
        init = {
            "processId": None,
            "rootUri": root.as_uri(),
            "capabilities": {},
            "initializationOptions": {"python": sys.executable, **options},
        }
        answer = await self.call("init", "initialize", init)
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return answer

    async def finish(self, timeout: float = WAIT) -> int:
        """Close stdin and wait for the exit code."""
        assert self.process.stdin is not None
        if not self.process.stdin.is_closing():
            self.process.stdin.close()
        return await asyncio.wait_for(self.process.wait(), timeout)

    async def stderr_text(self) -> str:
        assert self.process.stderr is not None
        return (await asyncio.wait_for(self.process.stderr.read(), WAIT)).decode(errors="replace")

    def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
