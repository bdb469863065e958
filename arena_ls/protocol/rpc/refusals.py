"""The project's refusals as JSON-RPC errors, for every method and command handler."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

from arena_ls.errors import ArenaError, InvalidParams
from arena_ls.protocol.rpc.bounded_errors import bound, long_strings
from arena_ls.protocol.wire import error_data

log = logging.getLogger(__name__)

T = TypeVar("T")


def refusals(handler: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Turn the project's refusals into JSON-RPC errors with ``error.data.reason``.

    ``handler`` is called as pygls calls it: the server first, then the params
    (a method) or the arguments (a command); only those are echoed, bounded.
    """

    @functools.wraps(handler)
    async def wrapped(*args: Any, **kwargs: Any) -> T:
        try:
            return await handler(*args, **kwargs)
        except InvalidParams as error:
            longs = long_strings(args[1:])
            raise JsonRpcInvalidParams(bound(str(error), longs)) from error
        except ArenaError as error:
            longs = long_strings(args[1:])
            raise JsonRpcException(
                message=bound(error.message, longs),
                code=error.code,
                data=bound(error_data(error.data), longs),
            ) from error
        except (JsonRpcException, asyncio.CancelledError):
            raise
        except Exception as error:
            # The traceback goes to stderr, never to the client (it may quote the client's values).
            log.exception("%s failed", handler.__name__)
            what = bound(f"{type(error).__name__}: {error}", long_strings(args[1:]))
            raise JsonRpcInternalError(message=f"internal error: {what[:400]}") from error

    return wrapped
