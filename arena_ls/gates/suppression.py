"""``# arena: ignore[AR010]`` on a line and ``# arena: ignore-file[AR011]`` anywhere.

Codes are a comma list; a bare ``# arena: ignore`` (no brackets) silences
every code on its line, a bare ``# arena: ignore-file`` every code in the file.
A finding on a line that ends inside a triple-quoted string (a docstring on
line 1) or with a backslash takes its comment where that string or
continuation ends, as ruff does for ``noqa``.
"""

from __future__ import annotations

import dataclasses
import re

from arena_ls.gates.model import Finding, TextEdit
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.source import SourceText, comment_line, comment_start

_DIRECTIVE = lazy(r"#\s*arena:\s*ignore(?P<file>-file)?(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)
ALL = "*"
_TRIPLE_DOUBLE = '"' * 3
_TRIPLE_SINGLE = "'" * 3


@dataclasses.dataclass(frozen=True, slots=True)
class Suppressions:
    by_line: dict[int, frozenset[str]]
    file: frozenset[str]
    lines: list[str] = dataclasses.field(default_factory=list, compare=False)

    def file_ignores(self, code: str) -> bool:
        return code in self.file or ALL in self.file

    def silences(self, finding: Finding) -> bool:
        if self.file_ignores(finding.code):
            return True
        if not self.by_line:
            return False
        for line in {finding.line, comment_line(self.lines, finding.line)}:
            codes = self.by_line.get(line, frozenset())
            if finding.code in codes or ALL in codes:
                return True
        return False


def parse_suppressions(source: SourceText) -> Suppressions:
    by_line: dict[int, set[str]] = {}
    file: set[str] = set()
    if "arena" not in source.text:
        return Suppressions(by_line={}, file=frozenset())
    for index, line in enumerate(source.lines):
        if "arena" not in line:
            continue
        start = _comment_start(line)
        if start < 0:
            continue
        for match in _DIRECTIVE.finditer(line, start):
            codes = _codes(match.group("codes"))
            target = file if match.group("file") else by_line.setdefault(index, set())
            target.update(codes)
    return Suppressions(
        by_line={k: frozenset(v) for k, v in by_line.items()}, file=frozenset(file), lines=source.lines
    )


def _codes(text: str | None) -> set[str]:
    if text is None:
        return {ALL}
    return {code.strip().upper() for code in text.split(",") if code.strip()}


def suppression_edit(source: str, finding: Finding) -> TextEdit:
    """An edit that silences ``finding`` on its line: appends ``  # arena: ignore[CODE]``.

    When the line already has an ``# arena: ignore[...]`` comment the code is
    merged into its list instead; a bare ``# arena: ignore`` already silences
    everything, so the edit then changes nothing.
    """
    text = SourceText(source)
    target = comment_line(text.lines, finding.line)
    line = text.line(target)
    directive = _line_directive(line)
    if directive is not None:
        codes = directive.group("codes")
        if codes is None:
            return TextEdit(target, len(line), target, len(line), "")
        merged = ", ".join(sorted(_codes(codes) | {finding.code}))
        return TextEdit(target, directive.start(), target, directive.end(), f"# arena: ignore[{merged}]")
    end = len(line.rstrip())
    return TextEdit(target, end, target, end, f"  # arena: ignore[{finding.code}]")


def _comment_start(line: str) -> int:
    """Where a line's comment starts, also on the line that closes a triple-quoted string.

    A line such as ``end of the docstring.<triple quote>  # arena: ignore[AR007]``
    starts inside a string; the text before its first triple quote is then
    prose, not code that opens a string (``x = <triple quote>``).
    """
    start = comment_start(line)
    if start >= 0:
        return start
    closes = [index for index in (line.find(_TRIPLE_DOUBLE), line.find(_TRIPLE_SINGLE)) if index >= 0]
    if not closes:
        return -1
    close = min(closes)
    prose = line[:close].strip()
    if not prose or prose[-1] in "=([{,:" or "'" in prose or '"' in prose:
        return -1
    rest = comment_start(line[close + 3 :])
    return close + 3 + rest if rest >= 0 else -1


def _line_directive(line: str) -> re.Match[str] | None:
    start = _comment_start(line)
    if start < 0:
        return None
    for match in _DIRECTIVE.finditer(line, start):
        if not match.group("file"):
            return match
    return None
