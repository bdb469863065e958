"""The session rules pygls leaves open, on top of its protocol object.

pygls dispatches messages well but checks little before it does: a request
before ``initialize`` runs (``arena/start`` launched a real run), a request
after ``shutdown`` is dropped unanswered, an object used as an id is echoed,
and ``exit`` ends the process with code 0 whether or not ``shutdown`` came
first (its ``sys.exit(1)`` is swallowed by ``start_io``). ``ArenaProtocol``
checks each decoded message's envelope and the session's state first, and
answers with the LSP codes (contract 6.1); only messages that pass reach
pygls's ``handle_message``. ``serve`` runs our frame reader
(``framing.py``) into it; the stdio and TCP servers in ``server.py`` use it.
"""

from __future__ import annotations

import contextvars
import hmac
import json
import logging
from contextlib import aclosing
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.progress import Progress
from pygls.protocol import LanguageServerProtocol

from arena_ls.protocol.rpc.framing import Broken, FrameReader, Message
from arena_ls.protocol.rpc.preencoded import PreEncodedResults

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
SERVER_NOT_INITIALIZED = -32002
MAX_ID_CHARS = 200
"""A string id longer than this is refused (-32600): answering it would echo it whole."""
MAX_ID_NUMBER = 2**53 - 1
"""Integer ids beyond what every JSON reader keeps exact are refused."""
_SESSION: contextvars.ContextVar[int] = contextvars.ContextVar("arena_session")
"""The connection a request came in on (its handler's context carries it to its answer)."""


def valid_id(value: Any) -> bool:
    """A request id the server can echo: an integer or a short string (LSP: ``integer | string``)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -MAX_ID_NUMBER <= value <= MAX_ID_NUMBER
    return isinstance(value, str) and len(value) <= MAX_ID_CHARS


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number out of range" if isinstance(value, int) else "a fractional number"
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return "an array" if isinstance(value, list) else "an object"


class ArenaProtocol(PreEncodedResults, LanguageServerProtocol):
    """pygls's protocol with the session's state checked before dispatch."""

    def __init__(self, server: Any, converter: Any) -> None:
        super().__init__(server, converter)
        self.token: str | None = None
        """Set for TCP: ``initialize`` must carry it as ``initializationOptions.token``."""
        self.initialize_received = False
        self.exit_code: int | None = None
        self.end_connection = False
        self.session = 0
        """Which connection this is (TCP): answers to an earlier one's requests are dropped."""

    def reset_session(self) -> None:
        """A new connection (TCP): nothing of the last client's session carries over."""
        for future in list(self._request_futures.values()):
            future.cancel()
        self._request_futures.clear()
        self._result_types.clear()
        self.session += 1
        self.initialize_received = False
        self._shutdown = False
        self.exit_code = None
        self.end_connection = False
        self._workspace = None
        self.progress = Progress(self)

    # -- answers ---------------------------------------------------------------------------

    def send_error(self, msg_id: int | str | None, code: int, message: str, data: Any = None) -> None:
        error: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            error["data"] = data
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": error})

    def frame_error(self, broken: Broken) -> None:
        """A frame that could not be read: -32700, under its request's id when it was found."""
        log.warning("unreadable input from the client: %s", broken.reason)
        msg_id = broken.request_id if valid_id(broken.request_id) else None
        self.send_error(msg_id, PARSE_ERROR, f"parse error: {broken.reason}")

    # -- messages --------------------------------------------------------------------------

    def receive(self, value: Any) -> None:
        """One decoded message: check its envelope and the session, then let pygls run it."""
        if not isinstance(value, dict):
            what = "a batch (an array), which LSP does not use" if isinstance(value, list) else _kind(value)
            self.send_error(
                None, INVALID_REQUEST, f"invalid request: a message must be an object, not {what}"
            )
            return
        if "method" not in value and ("result" in value or "error" in value):
            self._response(value)
            return
        has_id = "id" in value
        msg_id = value.get("id")
        if has_id and not valid_id(msg_id):
            self.send_error(
                None,
                INVALID_REQUEST,
                f"invalid request: `id` must be an integer or a string of at most {MAX_ID_CHARS} "
                f"characters, not {_kind(msg_id)}",
            )
            return
        answer_id = msg_id if has_id else None
        problem = _envelope_problem(value)
        if problem is not None:
            self.send_error(answer_id, INVALID_REQUEST, f"invalid request: {problem}")
            return
        if len(value["method"]) > MAX_ID_CHARS:
            # No method has such a name; pygls's "Method Not Found" would echo it whole.
            if isinstance(answer_id, (int, str)):
                shown = f"{value['method'][:80]}… ({len(value['method'])} characters)"
                self.send_error(answer_id, METHOD_NOT_FOUND, f"method not found: {shown}")
            return
        if isinstance(answer_id, (int, str)):
            self._request(answer_id, value["method"], value)
        else:
            self._notification(value["method"], value)

    def _response(self, value: dict[str, Any]) -> None:
        """The client's answer to one of our requests (never answered back)."""
        if value.get("jsonrpc") != "2.0" or not valid_id(value.get("id")):
            log.warning("ignoring a response with a bad envelope")
            return
        self._dispatch(value, None, "response")

    def _request(self, msg_id: int | str, method: str, value: dict[str, Any]) -> None:
        if method == "initialize":
            if self.initialize_received:
                self.send_error(msg_id, INVALID_REQUEST, "invalid request: `initialize` was already received")
                return
            if self.token is not None and not self._token_matches(value):
                log.warning("closing a TCP connection whose initialize did not carry the server's token")
                self._send_data(token_refusal(msg_id))
                self.end_connection = True
                return
            self.initialize_received = True
        elif not self.initialize_received:
            self.send_error(
                msg_id,
                SERVER_NOT_INITIALIZED,
                f"the server is not initialized: send `initialize` before {method[:80]!r}",
            )
            return
        elif self._shutdown:
            self.send_error(
                msg_id,
                INVALID_REQUEST,
                "invalid request: the server is shutting down; after `shutdown` only `exit` is accepted",
            )
            return
        self._dispatch(value, msg_id, method)

    def _notification(self, method: str, value: dict[str, Any]) -> None:
        if method == "exit":
            self.exit_code = 0 if self._shutdown else 1
            if self.exit_code:
                log.warning("`exit` without `shutdown`: ending with exit code 1")
            self.end_connection = True
            return
        if not self.initialize_received or self._shutdown:
            log.info("dropping notification %r outside an initialized session", method[:80])
            return
        self._dispatch(value, None, method)

    def _dispatch(self, value: dict[str, Any], msg_id: int | str | None, method: str) -> None:
        try:
            message = self.structure_message(value)
        except JsonRpcException as error:
            if msg_id is not None:
                self.send_error(msg_id, error.code, f"{method[:80]}: the params do not have the LSP shape")
            return
        _SESSION.set(self.session)  # the answer's callback runs in this context (see _send_response)
        self.handle_message(message)

    def warm_structuring(self) -> None:
        """Structure one message of each kind an editor sends first, and the answer to our
        ``workspace/configuration``: cattrs makes and caches each kind's structuring code at its
        first message (3-7 ms of the event loop before the first status). Called on a worker
        thread (``protocol/warmup.py``); nothing is handled."""
        for message in FIRST_MESSAGES:
            self.structure_message(message)
        answer_type = self.get_result_type(types.WORKSPACE_CONFIGURATION)
        if answer_type is not None:
            self._converter.structure({"jsonrpc": "2.0", "id": 0, "result": [None]}, answer_type)

    def _token_matches(self, value: dict[str, Any]) -> bool:
        """Compare the offered token in constant time, and keep it out of the settings."""
        assert self.token is not None
        matches = offers_token(value, self.token)
        params = value.get("params")
        options = params.get("initializationOptions") if isinstance(params, dict) else None
        if isinstance(options, dict):
            options.pop("token", None)
        return matches

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        """Answer a request, unless it came from a client that has since left (TCP): its
        answer must not reach the next client, who never sent that id."""
        if _SESSION.get(self.session) != self.session:
            log.info("dropping the answer to request %r of a client that has left", msg_id)
            return
        super()._send_response(msg_id, result, error)


FIRST_MESSAGES: tuple[dict[str, Any], ...] = (
    {"jsonrpc": "2.0", "method": types.INITIALIZED, "params": {}},
    {"jsonrpc": "2.0", "id": 0, "method": "arena/status", "params": {}},
)
"""Messages an editor sends first (``warm_structuring``)."""


def offers_token(value: dict[str, Any], token: str) -> bool:
    """Whether an ``initialize`` message carries ``token`` (constant-time compare; nothing changed)."""
    params = value.get("params")
    options = params.get("initializationOptions") if isinstance(params, dict) else None
    offered = options.get("token") if isinstance(options, dict) else None
    if not isinstance(offered, str):
        return False
    return hmac.compare_digest(offered.encode("utf-8", "replace"), token.encode())


def token_refusal(msg_id: int | str | None) -> dict[str, Any]:
    """The answer to an ``initialize`` without the server's token (the connection is then closed)."""
    return _error_message(
        msg_id,
        INVALID_REQUEST,
        "this arena-ls serves TCP with a token: pass it as initializationOptions.token "
        "(the server printed the token file's path on its stderr)",
        {"reason": "token-required"},
    )


def already_connected(msg_id: int | str | None) -> dict[str, Any]:
    """The answer to a second client's ``initialize`` while the first is connected."""
    return _error_message(
        msg_id,
        INVALID_REQUEST,
        "this arena-ls already serves a client over TCP (one client at a time)",
        {"reason": "already-connected"},
    )


def before_initialize(event: Message | Broken) -> dict[str, Any] | None:
    """The answer to what a connection sends before its ``initialize`` (TCP, before it holds the
    server): -32700 for a broken frame, -32002 for a request, -32600 for what is not a message;
    None for a notification or a response (dropped, as a session drops them)."""
    if isinstance(event, Broken):
        log.warning("unreadable input from a connection that has not initialised: %s", event.reason)
        msg_id = event.request_id if valid_id(event.request_id) else None
        return _error_message(msg_id, PARSE_ERROR, f"parse error: {event.reason}")
    value = event.value
    if not isinstance(value, dict):
        return _error_message(None, INVALID_REQUEST, "invalid request: a message must be an object")
    msg_id = value.get("id")
    if "method" not in value or "id" not in value:
        return None
    if not valid_id(msg_id):
        return _error_message(None, INVALID_REQUEST, "invalid request: `id` must be an integer or a string")
    method = value["method"] if isinstance(value["method"], str) else "?"
    return _error_message(
        msg_id,
        SERVER_NOT_INITIALIZED,
        f"the server is not initialized: send `initialize` before {method[:80]!r}",
    )


def is_initialize(event: Message | Broken) -> bool:
    """An ``initialize`` request with an id the server can answer."""
    if not isinstance(event, Message) or not isinstance(event.value, dict):
        return False
    value = event.value
    return value.get("method") == "initialize" and valid_id(value.get("id"))


def is_exit(event: Message | Broken) -> bool:
    return (
        isinstance(event, Message) and isinstance(event.value, dict) and event.value.get("method") == "exit"
    )


def encode_message(message: dict[str, Any]) -> bytes:
    """One frame, as the server writes them."""
    body = json.dumps(message).encode("utf-8")
    return b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body


def _error_message(msg_id: int | str | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg_id, "error": error}


def _envelope_problem(value: dict[str, Any]) -> str | None:
    if value.get("jsonrpc") != "2.0":
        return '`jsonrpc` must be "2.0"'
    if "method" not in value:
        return "a message needs a `method` (or `result` / `error` when it is a response)"
    if not isinstance(value["method"], str):
        return "`method` must be a string"
    return None  # params of the wrong shape are the method's to refuse, with -32602 naming them


async def serve(reader: FrameReader, protocol: ArenaProtocol) -> None:
    """Feed one connection's messages to the protocol until it ends (EOF, ``exit``, bad token)."""
    async with aclosing(reader.events()) as events:
        async for event in events:
            if isinstance(event, Message):
                protocol.receive(event.value)
            else:
                protocol.frame_error(event)
            if protocol.end_connection:
                return


class DiscardWriter:
    """The writer while no client is connected (TCP): what the runs report goes nowhere."""

    def write(self, data: bytes) -> None:
        return None

    def close(self) -> None:
        return None
