"""Answers written as JSON off the event loop: a page of ``arena/metrics`` is up to a megabyte.

``json.dumps`` of such a page takes tens of milliseconds; done by pygls when
it sends the answer, it would hold the event loop that long. A handler
whose answer is that big builds it in a worker thread, encodes it there, and
answers a ``PreEncoded``: the protocol then writes it as it is.
"""

from __future__ import annotations

import json
from typing import Any

from pygls.protocol import JsonRPCResponseMessage


class PreEncoded:
    """A result already written as JSON text (by ``json.dumps``, in a worker thread)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    @classmethod
    def of(cls, value: Any) -> PreEncoded:
        return cls(json.dumps(value))


class PreEncodedResults:
    """A protocol mix-in: an answer whose result is ``PreEncoded`` is written without re-encoding."""

    CHARSET: str
    CONTENT_TYPE: str
    _include_headers: bool
    writer: Any

    def _send_data(self, data: Any) -> None:
        if isinstance(data, JsonRPCResponseMessage) and isinstance(data.result, PreEncoded):
            body = f'{{"id": {json.dumps(data.id)}, "jsonrpc": "2.0", "result": {data.result.text}}}'
            self._write_body(body)
            return
        super()._send_data(data)  # type: ignore[misc]

    def _write_body(self, body: str) -> None:
        """What pygls's ``_send_data`` does with the JSON text of a message."""
        if self.writer is None:
            return
        if self._include_headers:
            header = (
                f"Content-Length: {len(body)}\r\n"
                f"Content-Type: {self.CONTENT_TYPE}; charset={self.CHARSET}\r\n\r\n"
            )
            body = header + body
        self.writer.write(body.encode(self.CHARSET))  # stdout's and asyncio's writers are synchronous
