"""Regular expressions compiled on first use.

The gates name ~25 patterns at module level; compiling them all costs
``arena check`` about 10 ms of start-up, and a small file uses few of them.
``lazy`` returns a stand-in that compiles on its first method call and then
keeps the compiled pattern's methods, so later calls cost what a compiled
pattern's do.
"""

from __future__ import annotations

import re
from typing import Any, cast

_METHODS = ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split")


class _LazyPattern:
    __slots__ = ("_source", "_flags", *_METHODS)

    def __init__(self, source: str, flags: int) -> None:
        self._source = source
        self._flags = flags

    def __getattr__(self, name: str) -> Any:
        compiled = re.compile(self._source, self._flags)
        for method in _METHODS:
            setattr(self, method, getattr(compiled, method))
        return getattr(compiled, name)


def lazy(source: str, flags: int = 0) -> re.Pattern[str]:
    """A pattern that compiles when it is first used."""
    return cast("re.Pattern[str]", _LazyPattern(source, flags))
