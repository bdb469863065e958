"""Serving one client over stdio, or one at a time over TCP with a token (contract 6.1).

Both run our frame reader (``framing.py``) into ``ArenaProtocol``
(``transport.py``) in place of pygls's ``start_io`` / ``start_tcp``, so that
the framing and session rules hold on both, and so that ``exit`` gives its
exit code (pygls's is swallowed).

TCP: the server only ever has one client, and a neighbour cannot hold it
(contract 6.1 and 7.2, docs/security.md "The TCP token"):

- A connection has not shown the token yet when it arrives: it does not
  hold the server. Any number of them (up to ``MAX_WAITING``, the oldest
  dropped first) are read side by side, beside the client if there is one,
  until one sends ``initialize`` with the token; that one becomes the client,
  or is refused (``already-connected``) while the client is still there, who
  never notices. (Deciding at the ``initialize``, not at the accept, is what
  lets the owner reconnect at once: by then the old client's close has been
  seen.) Until then each is answered
  -32002 (a request) or -32700 (a frame it could not read), may send at most
  ``PRE_SESSION_BYTES`` in all (its reader never holds more, however large
  the frame it claims), and is closed after ``INITIALIZE_SECONDS``.
- A client that leaves, at any point of any request, frees the server at
  once: its session's state is reset before anything is awaited, its
  workspace view is closed in the background, and answers to its requests
  still in flight are dropped. An ``initialize`` that comes while the client
  has already closed its end waits for that, never refused for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from contextlib import aclosing
from pathlib import Path
from typing import Any, BinaryIO

import attrs
from pygls.io_ import StdoutWriter

from arena_ls import platform
from arena_ls.manifest.loader import link_leaving
from arena_ls.protocol.rpc.framing import (
    FrameReader,
    LimitedSource,
    Message,
    OverLimit,
    PipeSource,
    StreamSource,
)
from arena_ls.protocol.rpc.transport import (
    ArenaProtocol,
    DiscardWriter,
    already_connected,
    before_initialize,
    encode_message,
    is_exit,
    is_initialize,
    offers_token,
    serve,
    token_refusal,
)
from arena_ls.protocol.server import ArenaServer

log = logging.getLogger(__name__)

INITIALIZE_SECONDS = 2.0
"""A connection that has not initialised by then is closed (issue 24)."""
PRE_SESSION_BYTES = 1 << 20
"""What a connection may send before it has initialised, in all (contract 7.2)."""
MAX_WAITING = 32
"""Connections read side by side before one shows the token; the oldest goes first beyond this."""
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
        asyncio.run(_serve_then_end(server, reader, protocol))
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


async def _serve_then_end(server: ArenaServer, reader: FrameReader, protocol: ArenaProtocol) -> None:
    """Serve the client, then close its view of the workspace (the runs go on) while the loop still
    runs: a client that left without ``shutdown`` (killed) left the follower, the spare agent and
    the gates worker going, and ``asyncio.run`` would only cancel what it finds, once."""
    try:
        await serve(reader, protocol)
    finally:
        await server.end_session()


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


class _PeerReader(asyncio.StreamReader):
    """A connection's reader that says as soon as the peer has closed its end."""

    peer_closed = False

    def feed_eof(self) -> None:
        self.peer_closed = True
        super().feed_eof()


@attrs.define(eq=False)
class _Connection:
    reader: _PeerReader
    writer: asyncio.StreamWriter
    frames: FrameReader
    source: LimitedSource
    task: asyncio.Task[Any] | None = None

    @property
    def peer(self) -> Any:
        return self.writer.get_extra_info("peername")

    def answer(self, message: dict[str, Any]) -> None:
        self.writer.write(encode_message(message))


class _TcpListener:
    def __init__(self, server: ArenaServer) -> None:
        self.server = server
        self.protocol = _protocol(server)
        self.client: _Connection | None = None
        self.free = asyncio.Event()
        self.waiting: list[_Connection] = []

    async def run(self, host: str, port: int) -> None:
        self.protocol.set_writer(DiscardWriter())
        self.free.set()
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(self._stream_protocol, host, port)
        for sock in listener.sockets:
            address = sock.getsockname()
            log.warning("arena-ls: serving TCP on %s:%s (one client at a time)", address[0], address[1])
        async with listener:
            await listener.serve_forever()

    def _stream_protocol(self) -> asyncio.StreamReaderProtocol:
        loop = asyncio.get_running_loop()
        return asyncio.StreamReaderProtocol(_PeerReader(loop=loop), self.connection)

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert isinstance(reader, _PeerReader)
        peer = writer.get_extra_info("peername")
        source = LimitedSource(StreamSource(reader), PRE_SESSION_BYTES)
        connection = _Connection(reader, writer, FrameReader(source), source, asyncio.current_task())
        self._wait_beside_others(connection)
        try:
            await self._serve(connection)
        except (ConnectionError, OSError) as error:
            log.info("TCP connection %s went away: %s", peer, error)
        finally:
            if connection in self.waiting:
                self.waiting.remove(connection)
            writer.close()

    def _client_present(self) -> bool:
        """A client holds the server and has not closed its end."""
        return self.client is not None and not self.client.reader.peer_closed

    def _wait_beside_others(self, connection: _Connection) -> None:
        self.waiting.append(connection)
        if len(self.waiting) > MAX_WAITING:
            oldest = self.waiting.pop(0)
            log.warning("closing TCP connection %s: too many connections have not initialised", oldest.peer)
            if oldest.task is not None:
                oldest.task.cancel()

    async def _serve(self, connection: _Connection) -> None:
        try:
            initialize = await asyncio.wait_for(self._until_initialize(connection), INITIALIZE_SECONDS)
        except asyncio.TimeoutError:
            log.warning(
                "closed TCP connection %s: no initialize within %ss", connection.peer, INITIALIZE_SECONDS
            )
            return
        except OverLimit:
            log.warning(
                "closed TCP connection %s: over %d bytes before initialize",
                connection.peer,
                PRE_SESSION_BYTES,
            )
            return
        if initialize is None:
            return
        await self._hold(connection, initialize)

    async def _until_initialize(self, connection: _Connection) -> Message | None:
        """Read until the connection's ``initialize`` with the token, answering what comes before;
        None when it ends, sends ``exit``, or offers no token or another one (it is told so)."""
        async with aclosing(connection.frames.events()) as events:
            async for event in events:
                if is_initialize(event):
                    assert isinstance(event, Message)
                    if offers_token(event.value, self._token()):
                        return event
                    log.warning(
                        "closing TCP connection %s: its initialize did not carry the token", connection.peer
                    )
                    connection.answer(token_refusal(event.value["id"]))
                    return None
                if is_exit(event):
                    return None
                reply = before_initialize(event)
                if reply is not None:
                    connection.answer(reply)
                await connection.writer.drain()
        return None

    def _token(self) -> str:
        assert self.protocol.token is not None
        return self.protocol.token

    async def _hold(self, connection: _Connection, initialize: Message) -> None:
        """The connection showed the token: it becomes the client, unless one is connected."""
        if connection in self.waiting:
            self.waiting.remove(connection)  # never the oldest one closed for others now
        if self.client is not None and self.client.reader.peer_closed:
            await self.free.wait()  # the client that left is being let go: a step away
        if self._client_present():
            log.warning("refused TCP connection %s: a client is already connected", connection.peer)
            connection.answer(already_connected(initialize.value["id"]))
            return
        self.client = connection
        self.free.clear()
        connection.source.limit = None
        log.info("TCP client connected from %s", connection.peer)
        self.protocol.reset_session()
        self.protocol.set_writer(connection.writer)
        try:
            self.protocol.receive(initialize.value)
            if not self.protocol.end_connection:
                await serve(connection.frames, self.protocol)
        finally:
            self._let_go(connection)

    def _let_go(self, connection: _Connection) -> None:
        """The client left: its session ends now; closing its workspace view (never a run)
        goes on in the background, so that the next client is served at once."""
        self.protocol.set_writer(DiscardWriter())
        self.protocol.reset_session()
        self.client = None
        # Scheduled before the next client is woken, so that its reset runs first.
        self.server.run_task(self.server.end_session(), "end the last TCP client's session")
        self.free.set()
        log.info("TCP client %s disconnected; waiting for the next one", connection.peer)


def tcp_token(token_file: str | None, state_dir: Path, root: Path | None = None) -> tuple[str, Path]:
    """The token: read from ``token_file``, or a fresh random one written owner-only in the state folder.

    Never through a link: a state folder inside the workspace ``root`` by name that a link takes
    outside it is refused (ValueError), and the file is created with ``O_NOFOLLOW | O_EXCL``.
    """
    if token_file:
        path = Path(token_file)
        token = path.read_text(encoding="utf-8").strip()
        if len(token) < 16:
            raise ValueError(f"--token-file {path}: the token must be at least 16 characters")
        return token, path
    path = state_dir / TOKEN_FILE
    _refuse_link_out(path, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    _refuse_link_out(path, root)
    token = secrets.token_urlsafe(32)
    temporary = path.with_name(f".{TOKEN_FILE}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | platform.NO_FOLLOW_FLAG
    descriptor = os.open(temporary, flags, 0o600)
    try:
        os.write(descriptor, token.encode() + b"\n")
    finally:
        os.close(descriptor)
    os.chmod(temporary, 0o600)
    os.replace(temporary, path)
    return token, path


def _refuse_link_out(path: Path, root: Path | None) -> None:
    if root is None:
        return
    target = link_leaving(path.parent, root)
    if target is not None:
        raise ValueError(
            f"the state folder {path.parent} is a link to {target}, outside the workspace: "
            "the token is not written there (make it a folder of the workspace, or pass --token-file)"
        )
