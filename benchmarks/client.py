"""A small LSP client that drives the real ``arena-ls`` over stdio, as an editor would.

It is pygls's own client with a converter that keeps custom results and
notifications as plain dicts (as ``tests/helpers/lsp.py`` does), plus what a
benchmark needs: the moment each ``arena/log`` and ``arena/statusChanged``
notification arrived (``time.perf_counter``), the size of every
``arena/log`` message on the wire, and the server's stderr in a file rather
than a pipe nobody reads (a full pipe would stall the server and falsify
every figure).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lsprotocol import types
from pygls.io_ import run_async
from pygls.lsp.client import LanguageClient
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    default_converter,
)

log = logging.getLogger(__name__)

REQUEST_TIMEOUT = 120.0
ARENA_LOG_PREFIX = b'{"method": "arena/log"'

CAPABILITIES: dict[str, Any] = {
    "window": {"workDoneProgress": True, "showMessage": {}},
    "workspace": {"configuration": True, "codeLens": {"refreshSupport": True}},
    "textDocument": {"publishDiagnostics": {}, "codeLens": {}},
}
"""The parts of VS Code's capabilities that change what arena-ls sends."""


def _raw_converter() -> Any:
    """Keep custom results and notification params as plain dicts on the client side."""
    converter = default_converter()  # type: ignore[no-untyped-call]

    def keep(obj: Any, cls: type) -> Any:
        return cls(**obj)

    for cls in (JsonRPCResponseMessage, JsonRPCNotification, JsonRPCRequestMessage):
        converter.register_structure_hook(cls, keep)
    return converter


class _CountingReader:
    """Wraps the server's stdout: records (arrival, size) of every ``arena/log`` message."""

    def __init__(self, reader: asyncio.StreamReader, sink: list[tuple[float, int]]) -> None:
        self._reader = reader
        self._sink = sink

    async def readline(self) -> bytes:
        return await self._reader.readline()

    async def readexactly(self, n: int) -> bytes:
        body = await self._reader.readexactly(n)
        if body.startswith(ARENA_LOG_PREFIX):
            self._sink.append((time.perf_counter(), n))
        return body


class BenchClient(LanguageClient):
    """An LSP client that timestamps what arena-ls sends it."""

    def __init__(self) -> None:
        super().__init__("arena-bench", "1", converter_factory=_raw_converter)
        self.log_batches: list[tuple[float, dict[str, Any]]] = []
        self.log_bytes: list[tuple[float, int]] = []
        self.statuses: list[tuple[float, dict[str, Any]]] = []
        self.on_log: Callable[[float, dict[str, Any]], None] | None = None
        self._status_waiters: list[tuple[Callable[[dict[str, Any]], bool], asyncio.Future[float]]] = []
        self._register_handlers()

    def _register_handlers(self) -> None:
        handlers: dict[str, Callable[[BenchClient, Any], Any]] = {
            "arena/log": _on_log,
            "arena/statusChanged": _on_status,
            "window/workDoneProgress/create": _ignore,
            "workspace/codeLens/refresh": _ignore,
            "workspace/configuration": _on_configuration,
        }
        for method in (
            "window/logMessage",
            "window/showMessage",
            "$/progress",
            "textDocument/publishDiagnostics",
        ):
            handlers[method] = _ignore
        for method, handler in handlers.items():
            self.feature(method)(handler)

    def _arena_log(self, params: Any) -> None:
        now = time.perf_counter()
        self.log_batches.append((now, params))
        if self.on_log is not None:
            self.on_log(now, params)

    def _arena_status(self, params: Any) -> None:
        now = time.perf_counter()
        self.statuses.append((now, params))
        for predicate, future in list(self._status_waiters):
            if not future.done() and predicate(params):
                future.set_result(now)

    # -- process -----------------------------------------------------------------------------

    async def launch(
        self,
        argv: list[str],
        *,
        stderr_path: Path,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> asyncio.subprocess.Process:
        """Start the server with stdio pipes and its stderr in ``stderr_path``."""
        with open(stderr_path, "ab") as stderr:
            server = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                cwd=str(cwd) if cwd else None,
                env=env,
            )
        assert server.stdin is not None and server.stdout is not None
        self.protocol.set_writer(server.stdin)
        connection = asyncio.create_task(
            run_async(
                stop_event=self._stop_event,
                reader=_CountingReader(server.stdout, self.log_bytes),
                protocol=self.protocol,
                logger=log,
                error_handler=self.report_server_error,
            )
        )
        self._server = server
        exit_watch = asyncio.create_task(self._server_exit())  # type: ignore[no-untyped-call]
        self._async_tasks.extend([connection, exit_watch])
        return server

    @property
    def pid(self) -> int:
        assert self._server is not None
        return self._server.pid

    async def initialize_session(self, root: Path, options: dict[str, Any] | None) -> Any:
        """``initialize`` then ``initialized``; returns the initialize result."""
        params = types.InitializeParams(
            capabilities=self.protocol._converter.structure(CAPABILITIES, types.ClientCapabilities),
            root_uri=root.as_uri(),
            process_id=os.getpid(),
            initialization_options=options,
        )
        result = await asyncio.wait_for(self.initialize_async(params), REQUEST_TIMEOUT)
        self.initialized(types.InitializedParams())
        return result

    async def close(self) -> None:
        """``shutdown`` and ``exit``, then wait for the process (kill it if it hangs)."""
        if self._server is None or self.stopped:
            return
        try:
            if self._server.returncode is None:
                await asyncio.wait_for(self.shutdown_async(None), 30.0)
                self.exit(None)
                await asyncio.wait_for(self._server.wait(), 30.0)
        except (asyncio.TimeoutError, RuntimeError, ConnectionError) as error:
            log.warning("server did not shut down cleanly (%s): killing it", error)
            if self._server.returncode is None:
                self._server.kill()
                await self._server.wait()
        await self.stop()  # type: ignore[no-untyped-call]

    # -- requests ----------------------------------------------------------------------------

    async def call(self, method: str, params: Any = None, timeout: float = REQUEST_TIMEOUT) -> Any:
        return await asyncio.wait_for(self.protocol.send_request_async(method, params), timeout)

    def status_future(self, predicate: Callable[[dict[str, Any]], bool]) -> asyncio.Future[float]:
        """A future resolved with the arrival time of the first matching ``arena/statusChanged``."""
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        for arrived, params in self.statuses:
            if predicate(params):
                future.set_result(arrived)
                return future
        self._status_waiters.append((predicate, future))
        return future


def _ignore(client: BenchClient, params: Any) -> None:
    return None


def _on_log(client: BenchClient, params: Any) -> None:
    client._arena_log(params)


def _on_status(client: BenchClient, params: Any) -> None:
    client._arena_status(params)


def _on_configuration(client: BenchClient, params: Any) -> list[None]:
    """No ``arena`` section: the initialization options stand."""
    return [None for _ in getattr(params, "items", [None])]


def server_argv() -> list[str]:
    return [sys.executable, "-m", "arena_ls"]


async def open_session(
    root: Path, stderr_path: Path, *, argv: list[str] | None = None, options: dict[str, Any] | None = None
) -> BenchClient:
    """Start ``arena-ls`` on ``root`` and initialize it with ``{"python": sys.executable}``."""
    client = BenchClient()
    env = dict(os.environ)
    await client.launch(argv or server_argv(), stderr_path=stderr_path, cwd=root, env=env)
    await client.initialize_session(root, {"python": sys.executable, **(options or {})})
    return client
