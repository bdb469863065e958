"""Searching a trainer's output for a word in any case: libc's ``strcasestr`` where it folds ASCII."""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

CaseBlindSearch = Callable[[bytes, bytes], bool]
"""``(data, word) -> bool``: ``word`` (ASCII letters) is in ``data`` in any case; ``data`` has no NUL."""


@functools.cache
def case_blind_search() -> CaseBlindSearch | None:
    """libc's ``strcasestr`` (Linux, macOS), or None where there is none or it does not fold ASCII.

    The agent looks for the word "checkpoint" in any case in every byte a
    trainer prints (``checkpoint_lines.chunk_mentions_checkpoint``). In
    Python that is a lowered copy and a search, 0.6 ms a MiB, most of the
    agent's work in a flood; ``strcasestr`` takes 0.27 ms and needs no copy
    (and ctypes lets go of the GIL meanwhile). It folds case by the C
    locale's ``tolower``: a locale whose ``tolower('I')`` is not ``i``
    (Turkish ISO-8859-9) would miss ``CHECKPOINT``, so it is used only if
    every ASCII letter is found in its other case (``_folds_ascii``). It
    stops at a NUL byte: callers search data with a NUL the Python way.
    Windows: None (the C runtime has no such function).
    """
    if sys.platform == "win32":
        return None
    try:
        search = ctypes.CDLL(None).strcasestr
    except (OSError, AttributeError):
        return None
    search.restype = ctypes.c_void_p
    search.argtypes = (ctypes.c_char_p, ctypes.c_char_p)

    def found(data: bytes, word: bytes) -> bool:
        return search(data, word) is not None

    return found if _folds_ascii(found) else None


def _folds_ascii(found: CaseBlindSearch) -> bool:
    """Every ASCII letter is found in its other case (a false match would only cost a full parse)."""
    upper = bytes(range(ord("A"), ord("Z") + 1))
    lower = upper.lower()
    for big, small in zip(upper, lower, strict=True):
        if not (found(bytes([big]), bytes([small])) and found(bytes([small]), bytes([big]))):
            return False
    return True
