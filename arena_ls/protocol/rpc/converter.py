"""The JSON-RPC converter: keep custom-method params as plain JSON.

pygls turns unknown methods' params into namedtuples and, when a request
has no ``params`` or the envelope fails to structure, sends no response at
all. These hooks keep params as they arrived (None when absent), so every
custom request is answered, with -32602 when its params are bad.
"""

from __future__ import annotations

from typing import Any

import cattrs
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    default_converter,
)


def _request_hook(obj: Any, cls: type[JsonRPCRequestMessage]) -> JsonRPCRequestMessage:
    return cls(
        id=obj.get("id"),
        method=obj.get("method", ""),
        jsonrpc=obj.get("jsonrpc", "2.0"),
        params=obj.get("params"),
    )


def _notification_hook(obj: Any, cls: type[JsonRPCNotification]) -> JsonRPCNotification:
    return cls(method=obj.get("method", ""), jsonrpc=obj.get("jsonrpc", "2.0"), params=obj.get("params"))


def _notification_unhook(message: JsonRPCNotification) -> dict[str, Any]:
    """Our custom notifications carry plain JSON: hand it to ``json.dumps`` as it is.

    cattrs would otherwise walk every value of the params (an ``arena/log``
    batch holds a thousand line objects) only to rebuild the same dicts; any
    value that is not plain JSON still goes through pygls's ``default`` hook,
    which unstructures it as before.
    """
    return {"method": message.method, "jsonrpc": message.jsonrpc, "params": message.params}


def _response_unhook(message: JsonRPCResponseMessage) -> dict[str, Any]:
    """The answer of a custom method is plain JSON too (issue 24): a status of 500 jobs and 50 runs
    is some 15,000 values that cattrs would walk on the event loop; anything not plain JSON (an
    lsprotocol object a fallback answer carries) still goes through pygls's ``default`` hook."""
    return {"id": message.id, "jsonrpc": message.jsonrpc, "result": message.result}


def arena_converter() -> cattrs.Converter:
    converter: cattrs.Converter = default_converter()  # type: ignore[no-untyped-call]
    converter.register_structure_hook(JsonRPCRequestMessage, _request_hook)
    converter.register_structure_hook(JsonRPCNotification, _notification_hook)
    converter.register_unstructure_hook(JsonRPCNotification, _notification_unhook)
    converter.register_unstructure_hook(JsonRPCResponseMessage, _response_unhook)
    return converter
