"""The trainer's text: decoding, lines, and AST positions in characters.

``ast`` reports columns as UTF-8 byte offsets; findings use character
columns. Lines are split the way Python's tokenizer splits them
(``\\r\\n``, ``\\r`` or ``\\n``), never with ``str.splitlines`` (which also
breaks at form feeds and Unicode separators that Python does not count).
"""

from __future__ import annotations

import ast

from arena_ls.diagnostics import Span
from arena_ls.trainer_facts.patterns import lazy

_LINE_BREAK = lazy(r"\r\n|\r|\n")
_BOM = "\ufeff"


def decode_source(source: str | bytes) -> str:
    """Text of a trainer; undecodable bytes become U+FFFD instead of failing."""
    if isinstance(source, bytes):
        return source.decode("utf-8-sig", errors="replace")
    return source


class SourceText:
    """The lines of one trainer and conversions from AST positions."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.has_bom = text.startswith(_BOM)
        self.lines = _LINE_BREAK.split(text)
        newline = _LINE_BREAK.search(text)
        self.newline = newline.group(0) if newline else "\n"

    @property
    def parse_text(self) -> str:
        """What ``ast.parse`` gets: the text without a leading byte-order mark."""
        return self.text[1:] if self.has_bom else self.text

    def line(self, index: int) -> str:
        if 0 <= index < len(self.lines):
            return self.lines[index]
        return ""

    def char_col(self, index: int, byte_col: int) -> int:
        """Character column of a UTF-8 byte offset on 0-based line ``index``."""
        text = self.line(index)
        shift = 1 if index == 0 and self.has_bom else 0
        if shift:
            text = text[1:]
        if text.isascii():
            return min(byte_col, len(text)) + shift
        prefix = text.encode("utf-8")[:byte_col]
        return len(prefix.decode("utf-8", errors="ignore")) + shift

    def span(self, node: ast.AST) -> Span:
        """The range of an AST node (expression, statement, keyword, argument)."""
        line = getattr(node, "lineno", 1) - 1
        end_line = getattr(node, "end_lineno", None)
        end_line = line if end_line is None else end_line - 1
        col = self.char_col(line, getattr(node, "col_offset", 0))
        end_offset = getattr(node, "end_col_offset", None)
        end_col = len(self.line(end_line)) if end_offset is None else self.char_col(end_line, end_offset)
        return Span(line, col, end_line, end_col)

    def header_span(self, stmt: ast.stmt) -> Span:
        """The first line of a statement, from its start to the end of that line's code."""
        line = stmt.lineno - 1
        col = self.char_col(line, stmt.col_offset)
        end_col = max(col, len(_strip_comment(self.line(line)).rstrip()))
        return Span(line, col, line, end_col)

    def line_span(self, index: int) -> Span:
        """A whole line, without its line break (line 1 is index 0)."""
        return Span(index, 0, index, len(self.line(index)))

    def indentation(self, stmt: ast.stmt) -> str:
        text = self.line(stmt.lineno - 1)
        return text[: len(text) - len(text.lstrip(" \t"))]


def comment_start(line: str) -> int:
    """Index of the ``#`` that starts a comment on a line, or -1.

    A quote-aware scan of one line: it knows single-line strings, not
    strings that span lines, which is enough for suppression comments.
    """
    quote = ""
    index = 0
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\":
                index += 1
            elif line.startswith(quote, index):
                index += len(quote) - 1
                quote = ""
        elif char in "'\"":
            quote = char * 3 if line.startswith(char * 3, index) else char
            index += len(quote) - 1
        elif char == "#":
            return index
        index += 1
    return -1


def _strip_comment(line: str) -> str:
    start = comment_start(line)
    return line if start < 0 else line[:start]


def comment_line(lines: list[str], index: int) -> int:
    """The line where a comment about code that starts on line ``index`` can go.

    That is the line itself, unless it ends inside a triple-quoted string (a
    docstring, say) or with a backslash continuation: then the line where the
    string or the continuation ends. ``index`` must start outside a string.
    """
    quote = ""
    line_index = index
    while line_index < len(lines):
        line = lines[line_index]
        pos = 0
        while pos < len(line):
            char = line[pos]
            if quote:
                if char == "\\":
                    pos += 2
                elif line.startswith(quote, pos):
                    pos += len(quote)
                    quote = ""
                else:
                    pos += 1
            elif char == "#":
                return line_index
            elif char in "'\"":
                quote = char * 3 if line.startswith(char * 3, pos) else char
                pos += len(quote)
            else:
                pos += 1
        if len(quote) == 3 or (not quote and line.rstrip().endswith("\\")):
            line_index += 1
            continue
        return line_index
    return max(0, min(index, len(lines) - 1))
