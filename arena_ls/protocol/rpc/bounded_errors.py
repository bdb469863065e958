"""Bounded echoes: an error never repeats more than ``MAX_ECHO`` characters of a client's value.

Refusal messages name what the client asked for (``no job 'x' in the
manifest``). A client that sends a 50 MB id must not get 50 MB back (nor
make the server hold several copies of it): every long string of the
request's params is replaced, wherever it appears in the error's message
or data, by its first ``MAX_ECHO`` characters and its length.
"""

from __future__ import annotations

from typing import Any

MAX_ECHO = 200
_MAX_WALK = 10_000
"""Values looked at in params; past that, params are too large to be echoed at all."""


def shorten(text: str) -> str:
    return f"{text[:MAX_ECHO]}… ({len(text)} characters)"


def long_strings(params: Any) -> list[str]:
    """The strings of ``params`` (keys and values) longer than ``MAX_ECHO``, longest first."""
    found: set[str] = set()
    stack, seen = [params], 0
    while stack and seen < _MAX_WALK:
        value = stack.pop()
        seen += 1
        if isinstance(value, str):
            if len(value) > MAX_ECHO:
                found.add(value)
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
    return sorted(found, key=len, reverse=True)


def bound(value: Any, longs: list[str]) -> Any:
    """``value`` (a message or error data) with each long client string cut short."""
    if not longs:
        return value
    if isinstance(value, str):
        for text in longs:
            if len(value) < MAX_ECHO:
                break
            short = shorten(text)
            value = value.replace(text, short).replace(repr(text)[1:-1], short)
        return value
    if isinstance(value, dict):
        return {bound(key, longs): bound(item, longs) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [bound(item, longs) for item in value]
    return value
