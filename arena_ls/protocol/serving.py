"""Serving one client over stdio, or one at a time over TCP with a token (contract 6.1).

Both run our frame reader (``framing.py``) into ``ArenaProtocol``
(``transport.py``) in place of pygls's ``start_io`` / ``start_tcp``, so that
the framing and session rules hold on both, and so that ``exit`` gives its
exit code (pygls's is swallowed).

TCP: the server only ever has one client. A connection that arrives while
one is connected is closed at once, without a byte read from it, and the
first client never notices. A connection must send ``initialize`` with the
token within ``INITIALIZE_SECONDS`` or it is closed; until it has, none of
its requests runs (they get -32002). When the client leaves, its session
ends (its workspace view is closed, its progress tokens forgotten; runs go
on) and the next client can connect.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from pathlib import Path
from typing import Any, BinaryIO

from pygls.io_ import StdoutWriter

from arena_ls import platform
from arena_ls.protocol.framing import FrameReader, PipeSource, StreamSource
from arena_ls.protocol.server import ArenaServer
from arena_ls.protocol.transport import ArenaProtocol, DiscardWriter, serve

log = logging.getLogger(__name__)

INITIALIZE_SECONDS = 10.0
TOKEN_FILE = "tcp-token"


def _protocol(server: ArenaServer) -> ArenaProtocol:
    protocol = server.protocol
    assert isinstance(protocol, ArenaProtocol)
    return protocol


def serve_stdio(server: ArenaServer, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """Serve one client on stdin/stdout; the process's exit code."""
    protocol = _protocol(server)
    _enlarge_stdout(stdout)
    protocol.set_writer(StdoutWriter(stdout))
    reader = FrameReader(PipeSource(stdin))
    try:
        asyncio.run(serve(reader, protocol))
    except BrokenPipeError:
        log.error("the client closed its end of the connection; exiting")
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        server.shutdown()  # type: ignore[no-untyped-call]
    if reader.truncated is not None:
        log.error(
            "arena-ls: %s; exiting with code 1 so that the editor restarts the server", reader.truncated
        )
        return 1
    return protocol.exit_code if protocol.exit_code is not None else 0


def _enlarge_stdout(stdout: BinaryIO) -> None:
    """Linux: a 1 MiB pipe to the editor, so that writing an answer (a status of 500 jobs is some
    200 KB) does not block the event loop until the editor has read the first 64 KiB of it."""
    try:
        fd = stdout.fileno()
    except (OSError, ValueError, AttributeError):
        return
    platform.enlarge_pipe(fd)


def serve_tcp(server: ArenaServer, host: str, port: int, token: str) -> int:
    """Serve TCP on loopback, one client at a time, each proving the token."""
    _protocol(server).token = token
    listener = _TcpListener(server)
    try:
        asyncio.run(listener.run(host, port))
    except KeyboardInterrupt:
        return 130
    finally:
        server.shutdown()  # type: ignore[no-untyped-call]
    return 0


class _TcpListener:
    def __init__(self, server: ArenaServer) -> None:
        self.server = server
        self.protocol = _protocol(server)
        self.busy = False

    async def run(self, host: str, port: int) -> None:
        self.protocol.set_writer(DiscardWriter())
        listener = await asyncio.start_server(self.connection, host, port)
        for sock in listener.sockets:
            address = sock.getsockname()
            log.warning("arena-ls: serving TCP on %s:%s (one client at a time)", address[0], address[1])
        async with listener:
            await listener.serve_forever()

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        if self.busy:
            log.warning("refused a TCP connection from %s: a client is already connected", peer)
            writer.close()
            return
        self.busy = True
        log.info("TCP client connected from %s", peer)
        self.protocol.reset_session()
        self.protocol.set_writer(writer)
        serving = asyncio.current_task()
        assert serving is not None
        deadline = asyncio.get_running_loop().call_later(INITIALIZE_SECONDS, self._initialize_due, serving)
        try:
            await serve(FrameReader(StreamSource(reader)), self.protocol)
        except asyncio.CancelledError:
            log.warning("closed a TCP connection from %s that did not initialize in time", peer)
        except (ConnectionError, OSError) as error:
            log.info("TCP client %s went away: %s", peer, error)
        finally:
            deadline.cancel()
            self.protocol.set_writer(DiscardWriter())
            writer.close()
            await self._end_session()
            self.busy = False
            log.info("TCP client %s disconnected; waiting for the next one", peer)

    def _initialize_due(self, serving: asyncio.Task[Any]) -> None:
        if not self.protocol.initialize_received:
            serving.cancel()

    async def _end_session(self) -> None:
        """The client left: close its view of the workspace (never a run) and forget it."""
        self.protocol.reset_session()
        await self.server.end_session()


def tcp_token(token_file: str | None, state_dir: Path) -> tuple[str, Path]:
    """The token: read from ``token_file``, or a fresh random one written owner-only in the state folder."""
    if token_file:
        path = Path(token_file)
        token = path.read_text(encoding="utf-8").strip()
        if len(token) < 16:
            raise ValueError(f"--token-file {path}: the token must be at least 16 characters")
        return token, path
    path = state_dir / TOKEN_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    temporary = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(descriptor, token.encode() + b"\n")
    finally:
        os.close(descriptor)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return token, path
