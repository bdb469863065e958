"""The project's own diagnostic record, independent of LSP types.

The manifest loader and the trainer gates both produce these; the protocol
layer turns them into LSP diagnostics and into ``error.data.diagnostics``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Severity = Literal["error", "warning", "information", "hint"]


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    """A 0-based range, end exclusive (LSP style), in character columns."""

    line: int
    col: int
    end_line: int
    end_col: int

    def to_wire(self) -> dict[str, Any]:
        return {
            "start": {"line": self.line, "character": self.col},
            "end": {"line": self.end_line, "character": self.end_col},
        }


@dataclasses.dataclass(frozen=True, slots=True)
class Related:
    """A place elsewhere that explains a diagnostic (AR108 points at trainer gates)."""

    path: str
    span: Span
    message: str


@dataclasses.dataclass(frozen=True, slots=True)
class Diag:
    code: str
    message: str
    severity: Severity
    span: Span
    path: str = ""
    """The file the diagnostic is in (absolute), when known."""
    related: tuple[Related, ...] = ()
    data: Any = None
    jobs: tuple[str, ...] = ()
    """A gate finding that holds only for these manifest jobs (their arguments set the cadence
    it judges); empty: for every job that runs the trainer."""

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def holds_for(self, job_id: str) -> bool:
        """Whether this finding counts against ``job_id``'s start (see ``jobs``)."""
        return not self.jobs or job_id in self.jobs

    def to_wire(self, uri: str | None = None) -> dict[str, Any]:
        """The contract's ``{code, message, uri, range}`` shape (plus severity)."""
        from arena_ls.uris import path_to_uri

        return {
            "code": self.code,
            "message": self.message,
            "severity": self.severity,
            "uri": uri if uri is not None else (path_to_uri(self.path) if self.path else None),
            "range": self.span.to_wire(),
        }
