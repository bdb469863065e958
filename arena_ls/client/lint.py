"""``arena check``: the gates run locally (a lint, no server needed).

The work is ``arena_ls.gates.check.main_check``; this module gives it a
manifest linter (the manifest loader's diagnostics, and the scripts its jobs
name) and, with no PATH, the workspace's own manifest.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TextIO

from arena_ls.client.errors import EXIT_FAILED, CliError
from arena_ls.client.session import MANIFEST

ManifestFindings = tuple[list[tuple[Path, Any]], list[Path]]


def manifest_root(path: Path, fallback: Path) -> Path:
    """The workspace a manifest belongs to: above ``training/``, else ``fallback``."""
    resolved = path.resolve()
    return resolved.parent.parent if resolved.parent.name == "training" else fallback


def finding_severity(severity: str) -> Literal["error", "warning", "information"]:
    if severity == "error":
        return "error"
    return "warning" if severity == "warning" else "information"


def make_manifest_linter(fallback_root: Path) -> Callable[[Path], ManifestFindings]:
    from arena_ls.gates.model import Finding
    from arena_ls.manifest import load_manifest

    def lint(path: Path) -> ManifestFindings:
        root = manifest_root(path, fallback_root)
        result = load_manifest(path, root)
        findings: list[tuple[Path, Any]] = []
        for diag in result.diagnostics:
            span = diag.span
            finding = Finding(
                diag.code,
                diag.message,
                finding_severity(diag.severity),
                span.line,
                span.col,
                span.end_line,
                span.end_col,
            )
            findings.append((Path(diag.path) if diag.path else path, finding))
        scripts = [job.resolved_script(root) for job in result.jobs.values()]
        return findings, [s for s in scripts if s is not None and s.is_file()]

    return lint


def shown_path(path: Path) -> str:
    """Relative to the current folder when it is inside it, as people type paths."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def check_argv(args: argparse.Namespace, root: Path) -> list[str]:
    """``main_check``'s arguments; with no PATH, the workspace's manifest (when there is one)."""
    paths = list(args.paths)
    if not paths and (root / MANIFEST).is_file():
        paths = [shown_path(root / MANIFEST)]
    argv = [*paths, "--format", args.format]
    if args.fp32_only:
        argv.append("--fp32-only")
    return argv


def run_check(args: argparse.Namespace, root: Path, stdout: TextIO | None = None) -> int:
    try:
        from arena_ls.gates.check import main_check
    except ImportError as error:
        raise CliError(
            f"arena check is not available in this build ({error})", EXIT_FAILED
        ) from error
    return main_check(
        check_argv(args, root),
        stdout=stdout or sys.stdout,
        manifest_linter=make_manifest_linter(root),
    )
