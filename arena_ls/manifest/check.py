"""The manifest's side of ``arena check``: its findings and the scripts it names."""

from __future__ import annotations

from pathlib import Path

from arena_ls.gates import Finding
from arena_ls.manifest.loader import load_manifest


def workspace_root(manifest: Path) -> Path:
    """``<root>/training/manifest.json`` → ``<root>``; any other manifest → its folder."""
    folder = manifest.resolve().parent
    return folder.parent if folder.name == "training" else folder


def lint_manifest_for_check(manifest: Path) -> tuple[list[tuple[Path, Finding]], list[Path]]:
    """Findings of the manifest (AR101-AR110) and the trainer scripts of its jobs."""
    root = workspace_root(manifest)
    result = load_manifest(manifest, root)
    findings = [
        (
            manifest,
            Finding(
                code=d.code,
                message=d.message,
                severity="information" if d.severity == "hint" else d.severity,
                line=d.span.line,
                col=d.span.col,
                end_line=d.span.end_line,
                end_col=d.span.end_col,
            ),
        )
        for d in result.diagnostics
    ]
    scripts = [
        script
        for job in result.jobs.values()
        if job.kind == "train" and (script := job.resolved_script(root)) is not None and script.is_file()
    ]
    return findings, scripts
