"""Gate results for a job's trainer script, shared by start, status, lenses and diagnostics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arena_ls.diagnostics import Diag, Span
from arena_ls.manifest import Job

if TYPE_CHECKING:
    from arena_ls.protocol.workspace import Workspace


def trainer_gate_errors(ws: Workspace, job: Job) -> list[Diag]:
    """Error-severity gate diagnostics of the job's trainer (empty when it passes)."""
    if job.kind != "train":
        return []
    script = job.resolved_script(ws.root)
    if script is None or not script.is_file():
        return []
    return [d for d in lint_file(ws, str(script)) if d.is_error]


def lint_file(ws: Workspace, path: str, text: str | None = None) -> list[Diag]:
    """Every gate diagnostic of a trainer file (the open buffer's text when given)."""
    from arena_ls.gates import lint_trainer

    if text is None:
        try:
            with open(path, "rb") as handle:
                source: str | bytes = handle.read()
        except OSError:
            return []
    else:
        source = text
    fp32 = ws.health.fp32_only()
    return [
        Diag(
            code=f.code,
            message=f.message,
            severity=f.severity,
            span=Span(f.line, f.col, f.end_line, f.end_col),
            path=path,
            data={"fixTitle": f.fix_title} if f.fix_title else None,
        )
        for f in lint_trainer(source, fp32_only=fp32)
    ]
