"""The plain checkpoint lines the supervisor reads without a ``checkpoint.pattern``.

Shared by the runtime's event parser (``arena_ls.run.trainer_announcements``) and the
trainer gate AR014 (``arena_ls.trainer_facts.announce``), so the gate lets through
exactly the spellings the supervisor understands. Standard library only: the
gates import it from ``arena check``, whose start-up counts.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

BUILTIN_CHECKPOINT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # "saved checkpoint step=500 path=checkpoints/x.pt" (the step first, then path=)
    re.compile(
        r"\bsav(?:ed|ing)\s+(?:the\s+|a\s+)?(?:model\s+)?checkpoint\b[^\n]*?"
        r"\bstep\s*[:=#]?\s*(?P<step>\d+)[^\n]*?\bpath\s*[:=]\s*(?P<path>\S+)",
        re.IGNORECASE,
    ),
    # "saved checkpoint to out/ckpt.pt at step 200", "Saving checkpoint ... (step=200)"
    re.compile(
        r"\bsav(?:ed|ing)\s+(?:the\s+|a\s+)?(?:model\s+)?checkpoint\b"
        r"(?:\s+(?:to|at|in|as)\s+(?P<path>[^\s,;()]+))?[^\n]*?"
        r"\bstep\s*[:=#]?\s*(?P<step>\d+)",
        re.IGNORECASE,
    ),
    # "checkpoint saved: step=200 path=ckpt.pt", "Checkpoint written at step 200"
    re.compile(
        r"\bcheckpoint\s+(?:saved|written|stored)\b[^\n]*?\bstep\s*[:=#]?\s*(?P<step>\d+)",
        re.IGNORECASE,
    ),
    # Hugging Face: "Saving model checkpoint to out/checkpoint-200"
    re.compile(
        r"\bsaving\s+model\s+checkpoint\s+to\s+(?P<path>\S*?checkpoint-(?P<step>\d+)\S*)", re.IGNORECASE
    ),
)
"""Plain checkpoint lines recognised when the job has no ``checkpoint.pattern``.

Each has a ``step`` group (and may have a ``path`` group). Kept here, beside
the parser that uses them, and read by the trainer gate AR014.
"""

CHECKPOINT_WORD = "checkpoint"
"""The word every built-in spelling holds (they ignore case): a line without it, in any case,
announces no checkpoint to a job without a ``checkpoint.pattern``."""
_CHECKPOINT_WORD_BYTES = CHECKPOINT_WORD.encode()
_CHECKPOINT_WORD_ANY_CASE = re.compile(CHECKPOINT_WORD, re.IGNORECASE)
"""The word as the built-in patterns match it: ``re.IGNORECASE`` folds four letters outside ASCII
into ASCII ones, and three of them into letters of the word (``FOLDED_INTO_THE_WORD``)."""

FOLDED_INTO_THE_WORD = ("\u0130", "\u0131", "\u212a")
"""The characters outside ASCII that ``re.IGNORECASE`` takes for a letter of "checkpoint":
LATIN CAPITAL LETTER I WITH DOT ABOVE and LATIN SMALL LETTER DOTLESS I (for ``i``), KELVIN SIGN
(for ``k``). ``str.lower`` turns only the KELVIN SIGN into its letter, and the byte search only
ASCII: each level once saw a different word (issue 39). A unit test checks every code point."""
_FOLDED_UTF8 = tuple(char.encode() for char in FOLDED_INTO_THE_WORD)


def mentions_checkpoint(text: str) -> bool:
    """The cheap test before the built-in patterns: the word in any case (``CheckPoint``,
    ``CHECKpoint``, ``CHEC\u212aPOINT`` with a KELVIN SIGN), exactly as the patterns match it
    (``re.IGNORECASE``). The gate AR014, the supervisor's line parser and the byte-level check of a
    chunk (``chunk_mentions_checkpoint``) use this one rule, so that they agree on which lines may
    announce a checkpoint."""
    if text.isascii():  # a flag of the string: no scan
        return CHECKPOINT_WORD in text.lower()
    return _CHECKPOINT_WORD_ANY_CASE.search(text) is not None


def chunk_mentions_checkpoint(data: bytes) -> bool:
    """``mentions_checkpoint`` of a chunk of lines as the parser decodes them (UTF-8, undecodable
    bytes replaced), at the cost of a byte search: libc's ``strcasestr`` where it folds ASCII
    (0.27 ms a MiB, ``platform.case_blind_search``), else one lowering and one search (0.6 ms).
    The word spelt with a letter from outside ASCII can only be there when one of the three
    characters' UTF-8 bytes is (a ``memmem`` each, and only for a chunk that is not all ASCII):
    then the chunk is decoded and asked the text's question, so bytes and text never disagree."""
    if ascii_word_in(data, _CHECKPOINT_WORD_BYTES):
        return True
    if data.isascii() or not any(folded in data for folded in _FOLDED_UTF8):
        return False
    return mentions_checkpoint(data.decode("utf-8", "replace"))


def ascii_word_in(data: bytes, word: bytes) -> bool:
    """``word`` (lower-case ASCII) is in ``data`` in any ASCII case: exactly ``word in data.lower()``,
    by ``strcasestr`` where the platform has one that folds ASCII (no copy, no GIL)."""
    search = _case_blind_search()
    if search is not None and b"\0" not in data:  # strcasestr stops at a NUL
        return search(data, word)
    return word in data.lower()


@functools.cache
def _case_blind_search() -> Callable[[bytes, bytes], bool] | None:
    """The platform's search, looked up at the first chunk (then kept): the gates import this
    module and ``arena check`` does not need it (nor the platform module's start-up)."""
    from arena_ls.platform import case_blind_search

    return case_blind_search()
