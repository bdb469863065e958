"""The interpreter's own flags (contract 7.3): ``-E``/``-I`` make Python ignore the agent's variables.

The agent sets ``PYTHONUNBUFFERED`` and ``PYTHONUTF8`` so that a trainer's
prints arrive as they are made and in UTF-8. An interpreter given ``-E`` or
``-I`` (the seed's ``py -3.10 -E``) ignores every ``PYTHON*`` variable: its
un-flushed prints arrive at exit, and on Windows a non-ASCII print can crash
it. So the agent adds the same choices as flags, ``-u -X utf8``, after the
interpreter's own options and before the script.

Standard library only (``trainer_start`` is loaded before the agent's heavier imports).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

INTERPRETER = re.compile(r"(python[\d.]*w?|pythonw|py|pyw)(\.exe)?", re.IGNORECASE)
"""A Python interpreter or the ``py`` launcher, by the last part of its path."""
IGNORES_ENVIRONMENT = frozenset("EI")
"""Short options that make Python ignore ``PYTHON*`` variables."""
TAKES_VALUE = frozenset("XWQ")
"""Short options whose value follows (``-X utf8``, ``-W error``)."""
ENDS_OPTIONS = frozenset("cm")
"""``-c``/``-m``: the rest of the line is the program's."""
ADDED = ("-u", "-X", "utf8")


def is_interpreter(program: str) -> bool:
    """True for a Python interpreter or the ``py`` launcher, by name (any case, either slash)."""
    name = re.split(r"[\\/]", program)[-1]
    return bool(INTERPRETER.fullmatch(name))


def with_stream_flags(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``-u -X utf8`` after the interpreter's options when they include ``-E`` or ``-I``.

    Anything else (a program that is not Python, no ``-E``/``-I``, both
    flags there already) is returned unchanged.
    """
    argv = list(argv)
    if not argv or not is_interpreter(argv[0]):
        return argv
    end, letters, values = _interpreter_options(argv)
    if not letters & IGNORES_ENVIRONMENT:
        return argv
    added: list[str] = []
    if "u" not in letters:
        added.append("-u")
    if not any(value.split("=", 1)[0] == "utf8" for value in values):
        added.extend(["-X", "utf8"])
    return [*argv[:end], *added, *argv[end:]]


def _interpreter_options(argv: list[str]) -> tuple[int, set[str], list[str]]:
    """Where the interpreter's options end, their short letters, and their ``-X`` values.

    ``-3.10`` (the launcher's version) is an option of the line too.
    """
    letters: set[str] = set()
    x_values: list[str] = []
    index = 1
    while index < len(argv):
        arg = argv[index]
        if arg == "--" or not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            return index, letters, x_values
        if re.fullmatch(r"-[23](\.\d+)?(-32|-64)?", arg):
            index += 1
            continue
        index, stop = _short_options(argv, index, letters, x_values)
        if stop:
            return index, letters, x_values
    return index, letters, x_values


def _short_options(argv: list[str], index: int, letters: set[str], x_values: list[str]) -> tuple[int, bool]:
    """Read one ``-abc`` group; ``(next index, True when -c/-m ends the options)``."""
    arg = argv[index]
    for position, letter in enumerate(arg[1:], start=1):
        if letter in ENDS_OPTIONS:
            return index, True
        if letter in TAKES_VALUE:
            value = arg[position + 1 :]
            if not value and index + 1 < len(argv):
                index += 1
                value = argv[index]
            if letter == "X":
                x_values.append(value)
            return index + 1, False
        letters.add(letter)
    return index + 1, False
