"""Gate results for a job's trainer script, shared by start, status, lenses and diagnostics."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from arena_ls.diagnostics import Diag, Span
from arena_ls.gates import Finding, lint_trainer
from arena_ls.manifest import Job

if TYPE_CHECKING:
    from arena_ls.protocol.workspace import Workspace


_CACHE: dict[tuple[str, int, int, bool | None, tuple[str, ...]], list[Diag]] = {}
_CACHE_LIMIT = 64


def trainer_gate_errors(ws: Workspace, job: Job) -> list[Diag]:
    """Error-severity gate diagnostics of the job's trainer file (empty when it passes).

    Cached by the file's identity (path, size, mtime) and the device profile,
    since status, lenses and starts ask for it often and files rarely change.
    """
    if job.kind != "train":
        return []
    script = job.resolved_script(ws.root)
    if script is None:
        return []
    try:
        stat = script.stat()
    except OSError:
        return []
    patterns = checkpoint_patterns(ws, str(script))
    key = (str(script), stat.st_size, stat.st_mtime_ns, ws.health.fp32_only(), patterns)
    cached = _CACHE.get(key)
    if cached is None:
        cached = [d for d in lint_file(ws, str(script)) if d.is_error]
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = cached
    return list(cached)


def lint_file(ws: Workspace, path: str, text: str | None = None) -> list[Diag]:
    """Every gate diagnostic of a trainer file (the open buffer's text when given)."""
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
            data=_fix_data(f),
        )
        for f in lint_trainer(source, fp32_only=fp32,
                              checkpoint_patterns=checkpoint_patterns(ws, path))
    ]


def checkpoint_patterns(ws: Workspace, path: str) -> tuple[str, ...]:
    """The ``checkpoint.pattern`` of every job whose script is ``path`` (for AR014)."""
    try:
        target = os.path.realpath(path)
        jobs = ws.manifest().jobs.values()
        found = []
        for job in jobs:
            script = job.resolved_script(ws.root)
            if job.checkpoint_pattern and script is not None and (
                    os.path.realpath(script) == target):
                found.append(job.checkpoint_pattern)
    except (OSError, ValueError):
        return ()
    return tuple(sorted(set(found)))


def _fix_data(finding: Finding) -> dict[str, Any] | None:
    """The finding's quick fix, carried in the diagnostic for code actions."""
    if not finding.edits or not finding.fix_title:
        return None
    edits = [
        {"range": Span(e.line, e.col, e.end_line, e.end_col).to_wire(), "newText": e.new_text}
        for e in finding.edits
    ]
    return {"fix": {"title": finding.fix_title, "edits": edits}}
