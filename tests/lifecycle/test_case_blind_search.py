"""The checkpoint word in any case, at C speed where the platform allows (``platform.case_blind_search``).

``chunk_mentions_checkpoint`` must answer exactly as the text's test does, whatever the bytes
(NUL, non-ASCII, the word cut anywhere): a wrong "no" would make a record quiet and hide a checkpoint
from the agent. The libc search is used only where it folds ASCII as Python does; a C library that
does not (Turkish ISO-8859-9: ``tolower('I')`` is dotless ``ı``) or Windows gets the Python way.
"""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arena_ls import platform
from arena_ls.lifecycle import checkpoint_lines
from arena_ls.lifecycle.checkpoint_lines import chunk_mentions_checkpoint, mentions_checkpoint

WORD = b"checkpoint"


def python_way(data: bytes) -> bool:
    """The text's answer (``mentions_checkpoint``) of the bytes as the parser decodes them: the ASCII
    word in any case, or the word with a letter that ``re.IGNORECASE`` folds (KELVIN SIGN, dotless i)."""
    return mentions_checkpoint(data.decode("utf-8", "replace"))


MASKS = (0, 1, 0b1111111111, 0b0000100001, 0b1010101010, 0b0101010101, 0b1000000000)
"""Which letters are capitals: checkpoint, Checkpoint, CHECKPOINT, CheckPoint, alternating, one."""


def case_variants() -> list[bytes]:
    word = WORD.decode()
    return ["".join(c.upper() if mask >> i & 1 else c for i, c in enumerate(word)).encode() for mask in MASKS]


@pytest.mark.skipif(sys.platform == "win32", reason="the C library's search: Linux and macOS")
def test_the_c_librarys_search_is_used_here_and_finds_every_case() -> None:
    search = platform.case_blind_search()
    assert search is not None
    for variant in case_variants():
        assert search(b"saved " + variant + b" step=5\n", WORD), variant
    assert not search(b"a check, a point, a joint\n" * 100, WORD)


def test_a_c_library_that_does_not_fold_ascii_is_not_used() -> None:
    assert platform.search._folds_ascii(lambda data, word: word.lower() in data.lower())
    assert not platform.search._folds_ascii(_no_capital_i)


def _no_capital_i(data: bytes, word: bytes) -> bool:
    """A search whose locale folds ``I`` elsewhere (Turkish ISO-8859-9): ``I`` never matches ``i``."""
    if (b"I" in data and b"i" in word) or (b"i" in data and b"I" in word):
        return False
    return word.lower() in data.lower()


def test_windows_has_no_such_search(monkeypatch: pytest.MonkeyPatch) -> None:
    platform.case_blind_search.cache_clear()
    monkeypatch.setattr(sys, "platform", "win32")
    try:
        assert platform.case_blind_search() is None
    finally:
        monkeypatch.undo()
        platform.case_blind_search.cache_clear()


def test_without_the_c_search_the_python_way_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint_lines, "_case_blind_search", lambda: None)
    for variant in case_variants():
        assert chunk_mentions_checkpoint(b"x " + variant)
    assert not chunk_mentions_checkpoint(b"a check, a point\n")


def test_a_nul_before_the_word_does_not_hide_it() -> None:
    """``strcasestr`` stops at a NUL: such data is searched the Python way."""
    assert chunk_mentions_checkpoint(b"binary \x00 junk then CHECKPOINT saved: step=3\n")
    assert not chunk_mentions_checkpoint(b"binary \x00 junk\n")


PIECES = st.sampled_from(
    [
        *case_variants(),
        b"check",
        b"point",
        b"CHECK",
        b"\x00",
        b"\xc4\xb0",
        b"\xc4\xb1",
        b"\xe2\x84\xaa",
        b"\xe2\x84",
        b"\xfd",
        b"I",
        b"i",
        b"K",
        b"\n",
        b" ",
        b"checkpoin",
        b"heckpoint",
    ]
)


@given(st.lists(st.one_of(PIECES, st.binary(max_size=12)), max_size=30))
def test_the_answer_is_the_lowerings_whatever_the_bytes(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    assert chunk_mentions_checkpoint(data) == python_way(data)
