"""Where each value of a manifest's JSON text sits: ``json_source_map.calculate``'s answer, faster.

The loader reports every AR1xx finding at the exact place of the value it
is about, so it needs the position of every value, by JSON pointer.
``json_source_map`` walks the text one character at a time in Python: for
a 500-job manifest that was 60-70 ms of CPU, half of the whole load, and
the first ``arena/status`` after start-up waited for that load (issue 38
item 7). This scanner gives the same answer (the same ``Entry`` and
``Location`` objects, the same pointers: a key as it is written between
its quotes, escapes and all, as ``json_source_map`` writes it; a later
duplicate key wins) with one regular expression match per token.
``tests/unit/test_manifest_positions.py`` holds the two to the same answer
for any JSON text.

It assumes valid JSON (the loader calls it after ``json.loads`` accepted
the text): in such a text no line break sits inside a string, so a
column is the distance from the last line break in the whitespace before.
"""

from __future__ import annotations

import re

from json_source_map.types import Entry, Location

_SPACE = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_PRIMITIVE = re.compile(r"[^\[\]{}:, \t\n\r]*")


def calculate(text: str) -> dict[str, Entry]:
    """The position of every value of ``text`` (valid JSON), by JSON pointer."""
    scanner = _Scanner(text)
    scanner.value(0, "", None)
    return dict(scanner.entries)


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.line = 0
        self.line_start = 0
        """Where the current line begins (the character after the last line break passed)."""
        self.entries: list[tuple[str, Entry]] = []

    def skip(self, position: int) -> int:
        """The first position at or after ``position`` that is not whitespace (lines counted)."""
        text = self.text
        end = _SPACE.match(text, position).end()  # type: ignore[union-attr]  # it matches "" too
        if end > position:
            breaks = text.count("\n", position, end)
            if breaks:
                self.line += breaks
                self.line_start = text.rindex("\n", position, end) + 1
        return end

    def at(self, position: int) -> Location:
        return Location(self.line, position - self.line_start, position)

    def value(self, position: int, pointer: str, key: tuple[Location, Location] | None) -> int:
        """Scan the value at (or after whitespace from) ``position``: its entry under ``pointer``
        (with ``key``'s place when it is an object's member), then those of what it holds, in
        the text's order. Returns the position after it."""
        position = self.skip(position)
        start = self.at(position)
        slot = len(self.entries)
        self.entries.append((pointer, _PENDING))
        char = self.text[position : position + 1]
        if char == "{":
            position = self._object(position + 1, pointer)
        elif char == "[":
            position = self._array(position + 1, pointer)
        elif char == '"':
            position = _STRING.match(self.text, position).end()  # type: ignore[union-attr]
        else:
            position = _PRIMITIVE.match(self.text, position).end()  # type: ignore[union-attr]
        key_start, key_end = key if key is not None else (None, None)
        self.entries[slot] = (pointer, Entry(start, self.at(position), key_start, key_end))
        return position

    def _object(self, position: int, pointer: str) -> int:
        text = self.text
        while True:
            position = self.skip(position)
            char = text[position]
            if char == "}":
                return position + 1
            if char == ",":
                position += 1
                continue
            key_start = self.at(position)
            key_end_position = _STRING.match(text, position).end()  # type: ignore[union-attr]
            key_end = self.at(key_end_position)
            name = text[position + 1 : key_end_position - 1]
            position = self.skip(key_end_position) + 1  # past the ':'
            position = self.value(position, f"{pointer}/{name}", (key_start, key_end))

    def _array(self, position: int, pointer: str) -> int:
        text = self.text
        index = 0
        while True:
            position = self.skip(position)
            char = text[position]
            if char == "]":
                return position + 1
            if char == ",":
                position += 1
                continue
            position = self.value(position, f"{pointer}/{index}", None)
            index += 1


_PENDING = Entry(Location(0, 0, 0), Location(0, 0, 0))
"""A value's place in the list while what it holds is scanned (its own entry comes first)."""
