"""The public value types of the gates: findings and the edits that fix them.

Positions are 0-based lines and columns, LSP style. Columns count Python
characters (code points) of the line; the LSP layer converts them to the
client's position encoding (UTF-16 by default).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

Severity = Literal["error", "warning", "information"]


@dataclasses.dataclass(frozen=True, slots=True)
class TextEdit:
    """Replace the text between two positions with ``new_text`` (an insert when they are equal)."""

    line: int
    col: int
    end_line: int
    end_col: int
    new_text: str


@dataclasses.dataclass(frozen=True, slots=True)
class Finding:
    """One diagnostic about a trainer script."""

    code: str
    message: str
    severity: Severity
    line: int
    col: int
    end_line: int
    end_col: int
    fix_title: str | None = None
    edits: tuple[TextEdit, ...] = ()
    jobs: tuple[str, ...] = ()
    """The manifest jobs it holds for, when the jobs that run the trainer set its cadence
    differently (their arguments); empty: every job."""
