"""A small LSP client session over a child ``arena-ls``'s stdio.

A minimal JSON-RPC implementation rather than pygls's ``LanguageClient``: the
terminal client needs plain dicts for the custom methods, full control of the
child's stderr and process group, and a fast start. It does what any editor
does: ``initialize``/``initialized``, requests with ids, the server's own
requests (``window/workDoneProgress/create`` is answered with null), and a
clean ``shutdown``/``exit`` at the end. Notifications go to one queue that the
caller reads; they are kept from the moment the session starts, so nothing a
server sends before a response is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import attrs

from arena_ls import __version__

STREAM_LIMIT = 64 << 20
"""Largest header line the reader accepts (bodies are read by length)."""
SHUTDOWN_TIMEOUT = 10.0
EXIT_TIMEOUT = 5.0
METHOD_NOT_FOUND = -32601


class JsonRpcError(Exception):
    """An error response: ``code``, ``message`` and ``data`` as the server sent them."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @property
    def reason(self) -> str | None:
        data = self.data
        reason = data.get("reason") if isinstance(data, dict) else None
        return reason if isinstance(reason, str) else None


class ServerExited(Exception):
    """The server's process ended, or its output stopped, with requests outstanding."""

    def __init__(self, returncode: int | None) -> None:
        super().__init__(f"arena-ls exited (code {returncode})")
        self.returncode = returncode


@attrs.frozen
class Notification:
    """A notification from the server (or one the client queues for itself)."""

    method: str
    params: Any


def server_command() -> list[str]:
    """How to start the server: this interpreter, ``-m arena_ls``."""
    return [sys.executable, "-m", "arena_ls"]


def encode_message(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


async def read_message(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """One framed message, or None at end of stream."""
    length: int | None = None
    while True:
        header = await reader.readline()
        if not header:
            return None
        if header in (b"\r\n", b"\n"):
            break
        name, _, value = header.decode("ascii", "replace").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None:
        return None
    body = await reader.readexactly(length)
    message = json.loads(body.decode("utf-8"))
    return message if isinstance(message, dict) else None


def _process_group_options() -> dict[str, Any]:
    """Keep the server out of the terminal's process group: Ctrl-C is the client's to handle."""
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


class LspSession:
    """One session with a child ``arena-ls``."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.notifications: asyncio.Queue[Notification] = asyncio.Queue()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._next_id = 0
        self._closed = False
        self._write_lock = asyncio.Lock()
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def launch(
        cls,
        command: Sequence[str],
        *,
        cwd: Path,
        stderr: IO[Any] | int | None = subprocess.DEVNULL,
        env: dict[str, str] | None = None,
    ) -> LspSession:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            cwd=str(cwd),
            env=env if env is not None else dict(os.environ),
            limit=STREAM_LIMIT,
            **_process_group_options(),
        )
        return cls(process)

    # -- requests and notifications -------------------------------------------------------

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and wait for its result; an error response raises ``JsonRpcError``."""
        if self._closed:
            raise ServerExited(self.process.returncode)
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def notify(self, method: str, params: Any = None) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _send(self, message: dict[str, Any]) -> None:
        stdin = self.process.stdin
        if stdin is None or self._closed:
            raise ServerExited(self.process.returncode)
        async with self._write_lock:
            try:
                stdin.write(encode_message(message))
                await stdin.drain()
            except (ConnectionError, RuntimeError) as error:
                raise ServerExited(self.process.returncode) from error

    # -- reading --------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            while True:
                message = await read_message(stdout)
                if message is None:
                    break
                await self._dispatch(message)
        except (asyncio.IncompleteReadError, ValueError, ConnectionError):
            pass
        finally:
            await self._lost()

    async def _lost(self) -> None:
        """The server's output ended: fail whatever still waits for an answer."""
        self._closed = True
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.process.wait(), EXIT_TIMEOUT)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ServerExited(self.process.returncode))

    async def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if isinstance(method, str) and "id" in message:
            await self._answer(message["id"], method, message.get("params"))
        elif isinstance(method, str):
            self.notifications.put_nowait(Notification(method, message.get("params")))
        else:
            self._resolve(message)

    def _resolve(self, message: dict[str, Any]) -> None:
        request_id = message.get("id")
        future = self._pending.get(request_id) if isinstance(request_id, int) else None
        if future is None or future.done():
            return
        error = message.get("error")
        if isinstance(error, dict):
            future.set_exception(
                JsonRpcError(int(error.get("code", 0)), str(error.get("message", "")), error.get("data"))
            )
        else:
            future.set_result(message.get("result"))

    async def _answer(self, request_id: Any, method: str, params: Any) -> None:
        """Answer the server's requests the way a plain editor would."""
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id}
        if method in (
            "window/workDoneProgress/create",
            "client/registerCapability",
            "client/unregisterCapability",
            "window/showMessageRequest",
        ):
            reply["result"] = None
        elif method == "workspace/configuration":
            items = params.get("items", []) if isinstance(params, dict) else []
            reply["result"] = [None for _ in items]
        else:
            reply["error"] = {
                "code": METHOD_NOT_FOUND,
                "message": f"arena does not handle {method}",
            }
        with contextlib.suppress(ServerExited):
            await self._send(reply)

    # -- lifetime -------------------------------------------------------------------------

    async def initialize(self, root: Path, options: dict[str, Any]) -> Any:
        result = await self.request("initialize", initialize_params(root, options))
        await self.notify("initialized", {})
        return result

    async def close(self) -> None:
        """``shutdown`` then ``exit``; a server that does not go is killed. Runs go on."""
        if not self._closed:
            with contextlib.suppress(ServerExited, JsonRpcError, asyncio.TimeoutError):
                await asyncio.wait_for(self.request("shutdown"), SHUTDOWN_TIMEOUT)
            with contextlib.suppress(ServerExited):
                await self.notify("exit")
        try:
            await asyncio.wait_for(self.process.wait(), EXIT_TIMEOUT)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


def initialize_params(root: Path, options: dict[str, Any]) -> dict[str, Any]:
    """What ``arena`` tells the server about itself: progress yes, configuration no."""
    uri = root.as_uri()
    return {
        "processId": os.getpid(),
        "clientInfo": {"name": "arena", "version": __version__},
        "rootUri": uri,
        "rootPath": str(root),
        "workspaceFolders": [{"uri": uri, "name": root.name or str(root)}],
        "capabilities": {
            "window": {"workDoneProgress": True, "showMessage": {}},
            "general": {"positionEncodings": ["utf-16"]},
        },
        "initializationOptions": options,
    }
