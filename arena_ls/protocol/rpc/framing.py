"""Reading JSON-RPC frames: our transport, in place of pygls's reader loop.

pygls's ``run_async`` reads ``Content-Length: N\\r\\n`` exactly (one regex,
case and line endings included) and has no way out of a frame it cannot
read: a wrong length, a lowercase header or LF-only lines leave it waiting
for a header that never comes, and a body that is not JSON is dropped with
no reply. The loop is a free function inside ``pygls.io_`` with no hook, so
arena-ls brings its own reader (this module) and hands each decoded message
to pygls's protocol object, which stays in charge of dispatching.

The rules (docs/protocol.md, "Framing"):

- Header names compare case-insensitively and a line may end in ``\\r\\n``
  or a bare ``\\n`` (HTTP's leniency); ``Content-Length`` is required.
- A body that is not UTF-8 JSON is answered with -32700 (with the request's
  id when it can be read from the body, else ``null``).
- A frame that cannot be read (no or a bad ``Content-Length``, a length
  that does not match the body, a garbled header line) is answered with
  -32700 and the reader *resynchronises*: it skips to the next
  ``Content-Length`` header. A request found in the skipped bytes gets the
  -32700 under its own id, so a client waiting for it is answered.
- A length longer than the body shows as a complete JSON value followed by
  the start of the next frame (or by silence): the value's request is
  answered -32700 and the bytes after it are read as the next frame.
- A body that stalls short of its length while the next frame's header has
  already come is cut at that header (a header line is never part of a JSON
  body): it is answered -32700 and the next frame is read. A body that is
  not JSON is cut at a header inside its length, too.
- A JSON message with no header at all is answered -32700 under its own id
  ("a message must come after a Content-Length header").
- The stream ending inside a frame is the one case that cannot be
  resynchronised: the reader reports it and the server exits non-zero.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import threading
from collections.abc import AsyncGenerator, Callable
from typing import Any, BinaryIO, Protocol

import attrs

log = logging.getLogger(__name__)

MAX_BODY = 128 << 20
"""Bodies claimed larger than this are skipped as broken frames (a 50 MB request still reads)."""
MAX_HEADER_LINE = 8 << 10
SKIP_KEEP = 1 << 20
"""Skipped bytes kept for finding a request's id in them; older junk is dropped."""
IDLE_SECONDS = 0.5
"""Silence inside a frame after which the reader looks at what it has (a client waits for a reply)."""
THREAD_DECODE_BYTES = 256 << 10
"""Bodies at least this large are decoded off the event loop."""

_HEADER_START = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_HEADER_LINE = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]*:[ \t]*(.*?)[ \t]*")
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,16}|"(?:[^"\\\n]|\\.){0,200}")')
_LINE_END = re.compile(rb"\r?\n")
_BARE_START = re.compile(rb"[ \t\r\n]*\{")


class ChunkSource(Protocol):
    """Bytes as they arrive; ``b""`` at the end of the stream; TimeoutError after ``timeout``."""

    async def read(self, timeout: float | None) -> bytes: ...


@attrs.frozen
class Message:
    """A decoded body."""

    value: Any


@attrs.frozen
class Broken:
    """A frame that could not be read; ``request_id`` is the id found in it, if any."""

    reason: str
    request_id: int | str | None = None


Event = Message | Broken


class _Reject(ValueError):
    pass


def _no_constants(name: str) -> Any:
    raise _Reject(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constants)


@attrs.frozen
class Decoded:
    """What decoding a body gave: a value and how many bytes it used, or why it is not JSON."""

    value: Any = None
    used: int = 0
    error: str | None = None


def decode_body(body: bytes) -> Decoded:
    """The first JSON value of ``body``; ``used < len(body)`` when something follows it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        return Decoded(error=f"the body is not valid UTF-8 (byte {error.start})")
    start = len(text) - len(text.lstrip())
    try:
        value, end = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as error:
        return Decoded(error=f"the body is not JSON: {error.msg} at character {error.pos}")
    except _Reject as error:
        return Decoded(error=f"the body is not JSON: {error}")
    except (ValueError, RecursionError):
        return Decoded(error="the body is not JSON: nested too deeply or malformed")
    if text[end:].strip():
        return Decoded(value, len(text[:end].encode("utf-8")))
    return Decoded(value, len(body))


def find_request_id(data: bytes) -> int | str | None:
    """The top-level ``"id"`` of a damaged body, when it can be read (for the error reply)."""
    for match in _ID.finditer(data, 0, min(len(data), SKIP_KEEP)):
        if _depth(data, match.start()) != 1:
            continue
        try:
            value = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return value
    return None


def _depth(data: bytes, end: int) -> int:
    """Object nesting at ``end``, counting braces outside strings (good enough for salvage)."""
    depth, in_string, escaped = 0, False, False
    for byte in data[:end]:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x7B, 0x5B):
            depth += 1
        elif byte in (0x7D, 0x5D):
            depth -= 1
    return depth


class FrameReader:
    """Splits a byte stream into messages and broken frames (see the module's rules)."""

    def __init__(self, source: ChunkSource) -> None:
        self.source = source
        self.buffer = bytearray()
        self.eof = False
        self.truncated: str | None = None
        """Set when the stream ended inside a frame: the caller exits non-zero."""
        self.after_broken_body = False
        """The last frame's body was broken: garbage right after it is its rest, already answered."""

    async def _fill(self, timeout: float | None = None) -> bool:
        """Read more; False at the end of the stream or when ``timeout`` passed in silence."""
        if self.eof:
            return False
        try:
            chunk = await self.source.read(timeout)
        except TimeoutError:
            return False
        if not chunk:
            self.eof = True
            return False
        self.buffer += chunk
        return True

    async def events(self) -> AsyncGenerator[Event, None]:
        while True:
            headers = await self._read_headers()
            if isinstance(headers, Broken):
                broken = await self._skip_to_next_frame(headers)
                if broken.request_id is not None or not self.after_broken_body:
                    yield broken
                self.after_broken_body = False
                continue
            if headers is None:
                return
            self.after_broken_body = False
            length = _content_length(headers)
            if isinstance(length, str):
                yield await self._skip_to_next_frame(Broken(length))
                continue
            event = await self._read_body(length)
            if event is None:
                return
            self.after_broken_body = isinstance(event, Broken)
            yield event

    async def _read_headers(self) -> dict[bytes, bytes] | Broken | None:
        """The header block up to its blank line; None at a clean end of the stream."""
        headers: dict[bytes, bytes] = {}
        while True:
            if not headers and _BARE_START.match(self.buffer):
                bare = await self._bare_message()
                if bare is not None:
                    return bare
            match = _LINE_END.search(self.buffer)
            if match is None:
                if len(self.buffer) > MAX_HEADER_LINE:
                    return Broken("a header line is too long")
                if not await self._fill():
                    if self.buffer.strip() or headers:
                        self.truncated = "the stream ended inside a frame's header"
                    return None
                continue
            line = bytes(self.buffer[: match.start()])
            del self.buffer[: match.end()]
            if not line:
                if headers:
                    return headers
                continue  # blank lines between frames are harmless
            parsed = _HEADER_LINE.fullmatch(line)
            if parsed is None:
                shown = line[:60].decode("utf-8", "replace")
                # Put back all but the first byte: a header may follow garbage on this line.
                self.buffer[0:0] = line[1:] + b"\n"
                return Broken(f"a header line could not be read: {shown!r}")
            headers.setdefault(parsed.group(1).lower(), parsed.group(2))

    async def _bare_message(self) -> Broken | None:
        """A JSON message where a header should be (a client that forgot the framing): -32700
        under its own id (docs/protocol.md, "Framing"). None when the bytes do not make a whole
        JSON value by the time the client goes quiet: they are then read as header lines."""
        while True:
            decoded = decode_body(bytes(self.buffer[:SKIP_KEEP]))
            if decoded.error is None:
                del self.buffer[: decoded.used]
                return Broken(
                    "a message must come after a Content-Length header; this one had none",
                    _request_id(decoded.value),
                )
            if len(self.buffer) > SKIP_KEEP or not await self._fill(IDLE_SECONDS):
                return None

    async def _read_body(self, length: int) -> Event | None:
        while len(self.buffer) < length:
            if await self._fill(IDLE_SECONDS):
                continue
            if self.eof:
                self.truncated = (
                    f"the stream ended inside a frame's body ({len(self.buffer)} of {length} bytes)"
                )
                return None
            early = await self._decode(bytes(self.buffer))
            if early.error is None and early.used == len(self.buffer):
                # A complete message and then silence: the length claimed more than was sent.
                del self.buffer[:]
                return Broken(
                    f"Content-Length {length} is longer than the message ({early.used} bytes)",
                    _request_id(early.value),
                )
            stalled = self._stalled_before_next_frame(length)
            if stalled is not None:
                return stalled
        body = bytes(self.buffer[:length])
        decoded = await self._decode(body)
        if decoded.error is not None:
            cut = _next_frame_in(body, 1)
            end = cut if cut is not None else length
            del self.buffer[:end]
            return Broken(decoded.error, find_request_id(body[:end]))
        if decoded.used < length:
            # A value and then more bytes: the next frame began inside this one; read it as one.
            del self.buffer[: decoded.used]
            return Broken(
                f"Content-Length {length} is longer than the message ({decoded.used} bytes)",
                _request_id(decoded.value),
            )
        del self.buffer[:length]
        return Message(decoded.value)

    def _stalled_before_next_frame(self, length: int) -> Broken | None:
        """The body stalled short of ``length`` while the next frame's header has already come:
        what lies before that header is lost (answered -32700) and the header is read next.

        A header line (``Content-Length: N`` and a line end) can never be part of a JSON
        body: JSON has no such token outside strings, and a raw line end inside a string is
        not JSON. So a slow body is never cut this way, only one that will never be whole.
        """
        cut = _next_frame_in(self.buffer, 1)
        if cut is None:
            return None
        lost = bytes(self.buffer[:cut])
        del self.buffer[:cut]
        decoded = decode_body(lost)
        if decoded.error is None and decoded.used == len(lost):
            reason = f"Content-Length {length} is longer than the message ({len(lost)} bytes)"
            return Broken(reason, _request_id(decoded.value))
        reason = f"the body is broken: the next frame began after {len(lost)} of its {length} bytes"
        return Broken(reason, find_request_id(lost))

    async def _decode(self, body: bytes) -> Decoded:
        if len(body) >= THREAD_DECODE_BYTES:
            return await asyncio.to_thread(decode_body, body)
        return decode_body(body)

    async def _skip_to_next_frame(self, broken: Broken) -> Broken:
        """Skip to the next ``Content-Length`` header; answer for a request found on the way."""
        skipped = 0
        while True:
            match = _HEADER_START.search(self.buffer)
            if match is not None:
                junk = bytes(self.buffer[: match.start()])
                del self.buffer[: match.start()]
                return self._with_id(broken, junk, skipped + len(junk))
            if len(self.buffer) > SKIP_KEEP:
                drop = len(self.buffer) - 64  # a header may straddle the cut
                skipped += drop
                del self.buffer[:drop]
            if await self._fill(IDLE_SECONDS):
                continue
            junk = bytes(self.buffer)
            decoded = decode_body(junk) if junk.strip() else Decoded(error="nothing")
            if decoded.error is None or self.eof:
                del self.buffer[: decoded.used if decoded.error is None else len(junk)]
                return self._with_id(broken, junk, skipped + len(junk))
            if not junk.strip():
                return broken  # silence after the broken header: answer it now

    def _with_id(self, broken: Broken, junk: bytes, skipped: int) -> Broken:
        if skipped:
            log.warning("skipped %d bytes of unframed input after: %s", skipped, broken.reason)
        if broken.request_id is not None:
            return broken
        decoded = decode_body(junk) if junk.strip() else Decoded(error="empty")
        found = _request_id(decoded.value) if decoded.error is None else find_request_id(junk)
        return attrs.evolve(broken, request_id=found)


_FRAME_START = re.compile(rb"content-length[ \t]*:[ \t]*\d{1,12}[ \t]*\r?\n", re.IGNORECASE)


def _next_frame_in(data: bytes | bytearray, start: int) -> int | None:
    """Where a ``Content-Length: N`` header line begins in ``data``, at ``start`` or later."""
    match = _FRAME_START.search(data, start)
    return match.start() if match is not None else None


def _request_id(value: Any) -> int | str | None:
    if isinstance(value, dict):
        found = value.get("id")
        if isinstance(found, (int, str)) and not isinstance(found, bool):
            return found
    return None


def _content_length(headers: dict[bytes, bytes]) -> int | str:
    """The body's length, or why the header block is unusable."""
    raw = headers.get(b"content-length")
    if raw is None:
        return "the frame has no Content-Length header"
    shown = raw[:40].decode("utf-8", "replace")
    if not raw.isdigit():
        return f"Content-Length {shown!r} is not a non-negative integer"
    length = int(raw)
    if length == 0:
        return "Content-Length 0: a frame must carry a message"
    if length > MAX_BODY:
        return f"Content-Length {length} is over the limit of {MAX_BODY} bytes"
    return length


# --------------------------------------------------------------------------- sources


class StreamSource:
    """An ``asyncio.StreamReader`` (a TCP connection) as a chunk source."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader

    async def read(self, timeout: float | None) -> bytes:
        return await asyncio.wait_for(self.reader.read(1 << 16), timeout)


class OverLimit(Exception):
    """A source gave more than its limit allows."""


class LimitedSource:
    """A source that gives at most ``limit`` bytes in all, then raises ``OverLimit``
    (``limit`` None: no limit). It never reads past the limit by more than one chunk,
    so what a reader buffers stays bounded whatever length a frame claims."""

    def __init__(self, source: ChunkSource, limit: int | None) -> None:
        self.source = source
        self.limit = limit
        self.given = 0

    async def read(self, timeout: float | None) -> bytes:
        if self.limit is not None and self.given > self.limit:
            raise OverLimit(f"more than {self.limit} bytes")
        chunk = await self.source.read(timeout)
        self.given += len(chunk)
        if self.limit is not None and self.given > self.limit:
            raise OverLimit(f"more than {self.limit} bytes")
        return chunk


class PipeSource:
    """A blocking binary stream (stdin) read by a daemon thread.

    A daemon thread, unlike pygls's thread-pool reads, never keeps the
    process alive after ``exit`` while the client still holds the pipe open.
    """

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.queue: asyncio.Queue[bytes] = asyncio.Queue()
        self.started = False

    def _start(self) -> None:
        loop = asyncio.get_running_loop()
        read = self._reader()

        def pump() -> None:
            while True:
                try:
                    chunk = read(1 << 16)
                except (OSError, ValueError):
                    chunk = b""
                try:
                    loop.call_soon_threadsafe(self.queue.put_nowait, chunk)
                except RuntimeError:  # the loop is closed: the server is ending
                    return
                if not chunk:
                    return

        threading.Thread(target=pump, name="arena-stdin", daemon=True).start()
        self.started = True

    def _reader(self) -> Callable[[int], bytes]:
        """``os.read`` on the descriptor: a daemon thread blocked in a buffered reader
        holds its lock, and Python aborts at exit when it cannot take that lock."""
        try:
            descriptor = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            # A buffered stream without a descriptor (BytesIO): read1 returns what is there.
            return self.stream.read1 if isinstance(self.stream, io.BufferedIOBase) else self.stream.read
        return lambda size: os.read(descriptor, size)

    async def read(self, timeout: float | None) -> bytes:
        if not self.started:
            self._start()
        return await asyncio.wait_for(self.queue.get(), timeout)
