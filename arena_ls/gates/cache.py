"""Gate results for a job's trainer script, shared by start, status, lenses and diagnostics.

No LSP here: the server's workspace holds one ``TrainerGates`` and hands its
``errors`` to the supervisor (the gates a start must pass) and its
``lint_file`` to the diagnostics feature (an open buffer's text).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from arena_ls.diagnostics import Diag, Severity, Span
from arena_ls.gates import lint_trainer
from arena_ls.gates.model import Finding
from arena_ls.gates.severity import with_severities
from arena_ls.manifest import Job, ManifestResult

CACHE_LIMIT = 64
"""Cached results kept before the cache starts over (a workspace has a handful of trainers)."""

CacheKey = tuple[str, int, int, bool | None, tuple[str, ...], tuple[tuple[str, str], ...]]


class TrainerGates:
    """The gates of a workspace's trainers, cached by file identity and device profile."""

    def __init__(
        self,
        root: Path,
        manifest: Callable[[], ManifestResult],
        fp32_only: Callable[[], bool | None],
        severities: Callable[[], Mapping[str, Severity]] | None = None,
    ) -> None:
        self.root = root
        self.manifest = manifest
        """The workspace's manifest as it is now (for each job's ``checkpoint.pattern``: AR014)."""
        self.fp32_only = fp32_only
        """The device profile as it is now (AR011)."""
        self.severities = severities or dict
        """The tunable gates' severities as they are now (``gates.severity``, AR010 on Windows)."""
        self._cache: dict[CacheKey, list[Diag]] = {}

    def errors(self, job: Job) -> list[Diag]:
        """Error-severity gate diagnostics of the job's trainer file (empty when it passes).

        Cached by the file's identity (path, size, mtime) and the device profile,
        since status, lenses and starts ask for it often and files rarely change.
        """
        if job.kind != "train":
            return []
        script = job.resolved_script(self.root)
        if script is None:
            return []
        try:
            stat = script.stat()
        except OSError:
            return []
        patterns = self.checkpoint_patterns(str(script))
        chosen = tuple(sorted(self.severities().items()))
        key = (str(script), stat.st_size, stat.st_mtime_ns, self.fp32_only(), patterns, chosen)
        cached = self._cache.get(key)
        if cached is None:
            cached = [d for d in self.lint_file(str(script)) if d.is_error]
            if len(self._cache) >= CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = cached
        return list(cached)

    def lint_file(self, path: str, text: str | None = None) -> list[Diag]:
        """Every gate diagnostic of a trainer file (the open buffer's text when given)."""
        if text is None:
            try:
                with open(path, "rb") as handle:
                    source: str | bytes = handle.read()
            except OSError:
                return []
        else:
            source = text
        findings = lint_trainer(
            source, fp32_only=self.fp32_only(), checkpoint_patterns=self.checkpoint_patterns(path)
        )
        return with_severities(
            (
                Diag(
                    code=f.code,
                    message=f.message,
                    severity=f.severity,
                    span=Span(f.line, f.col, f.end_line, f.end_col),
                    path=path,
                    data=_fix_data(f),
                )
                for f in findings
            ),
            self.severities(),
        )

    def checkpoint_patterns(self, path: str) -> tuple[str, ...]:
        """The ``checkpoint.pattern`` of every job whose script is ``path`` (for AR014)."""
        try:
            target = os.path.realpath(path)
            found = []
            for job in self.manifest().jobs.values():
                script = job.resolved_script(self.root)
                if job.checkpoint_pattern and script is not None and os.path.realpath(script) == target:
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
