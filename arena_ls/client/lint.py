"""``arena check``: the gates run locally (a lint, no server needed).

The work is ``arena_ls.gates.check.main_check``; this module gives it a
manifest linter (the manifest loader's diagnostics, and the scripts its jobs
name) and, with no PATH, what the editor lints: the workspace's own manifest
(and through it the jobs' scripts) and every ``train.py`` in the workspace.

``arena check`` must start fast (it runs in pre-commit hooks and editors'
save actions), so this module imports nothing of the LSP client at import
time; ``fast_main`` runs it without importing the rest of the terminal client
either (``arena_ls.client.entry`` calls it for ``arena check``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Literal, TextIO

from arena_ls.client.visible_controls import visible

ManifestFindings = tuple[list[tuple[Path, Any]], list[Path]]
MANIFEST = Path("training") / "manifest.json"
"""The same path as ``arena_ls.client.session.MANIFEST`` (not imported: it loads the client)."""
_SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".venv",
        "venv",
        "__pycache__",
        "node_modules",
        "build",
        "dist",
        ".tox",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "site-packages",
        ".arena",
    }
)


def manifest_root(path: Path, fallback: Path) -> Path:
    """The workspace a manifest belongs to: above ``training/``, else ``fallback``."""
    resolved = path.resolve()
    return resolved.parent.parent if resolved.parent.name == "training" else fallback


def finding_severity(severity: str) -> Literal["error", "warning", "information"]:
    if severity == "error":
        return "error"
    return "warning" if severity == "warning" else "information"


class ManifestLinter:
    """Lints manifests for ``arena check`` and remembers their ``train`` jobs by script, so the
    scripts are judged for the jobs' arguments (``jobs_of``), as the server judges them."""

    def __init__(self, fallback_root: Path) -> None:
        self.fallback_root = fallback_root
        self.jobs: dict[Path, list[tuple[str, tuple[str, ...], str | None]]] = {}

    def __call__(self, path: Path) -> ManifestFindings:
        from arena_ls.gates.model import Finding  # imported when a manifest is linted
        from arena_ls.manifest import load_manifest

        root = manifest_root(path, self.fallback_root)
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
        scripts = []
        for job in result.jobs.values():
            script = job.resolved_script(root)
            if script is None:
                continue
            scripts.append(script)
            if job.kind == "train":
                self.jobs.setdefault(script.resolve(), []).append((job.id, job.args, job.script))
        return findings, [s for s in scripts if s.is_file()]

    def jobs_of(self, script: Path) -> list[tuple[str, tuple[str, ...], str | None]]:
        """``(id, args, script)`` of every ``train`` job of the linted manifests that runs ``script``."""
        return list(self.jobs.get(script.resolve(), []))


def make_manifest_linter(fallback_root: Path) -> ManifestLinter:
    return ManifestLinter(fallback_root)


def shown_path(path: Path) -> str:
    """Relative to the current folder when it is inside it, as people type paths."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def train_scripts(root: Path) -> list[Path]:
    """Every ``train.py`` under the workspace (the editor lints any it opens), sorted."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith("."))
        if "train.py" in files:
            found.append(Path(folder) / "train.py")
    return sorted(found)


def check_argv(args: argparse.Namespace, root: Path) -> list[str]:
    """``main_check``'s arguments; with no PATH, the files the editor lints.

    That is the workspace's manifest (when there is one: its jobs' scripts are
    linted through it) and every ``train.py`` in the workspace.
    """
    paths = list(args.paths)
    if not paths:
        if (root / MANIFEST).is_file():
            paths.append(shown_path(root / MANIFEST))
        paths.extend(shown_path(script) for script in train_scripts(root))
    argv = [*paths, "--format", args.format]
    if args.fp32_only:
        argv.append("--fp32-only")
    return argv


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` with ``training/manifest.json``, else ``start``.

    The same as ``arena_ls.client.session.find_root``, without loading the client.
    """
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / MANIFEST).is_file():
            return folder
    return start


def fast_main(argv: list[str]) -> int | None:
    """``arena [--root R] [-v] check ...`` without loading the terminal client.

    None when the arguments are not a plain ``check`` call this parser knows:
    the full client then parses them (and reports a usage error its way).
    """
    parser = argparse.ArgumentParser(prog="arena", add_help=False, allow_abbrev=False)
    parser.add_argument("command")
    parser.add_argument("paths", nargs="*")
    parser.add_argument("--root", type=Path, default=None)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--fp32-only", action="store_true")
    try:
        args, unknown = parser.parse_known_args(argv)
    except SystemExit:
        return None
    if unknown or args.command != "check":
        return None
    root = (args.root or find_root(Path.cwd())).resolve()
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="replace")
    try:
        return run_check(args, root)
    except KeyboardInterrupt:
        print("arena: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as error:  # the client's promise: one line, never a traceback
        message = getattr(error, "message", None) or f"{type(error).__name__}: {error}"
        print(f"arena: {visible(' '.join(str(message).split())[:300])}", file=sys.stderr, flush=True)
        return int(getattr(error, "exit_code", 1))


def run_check(args: argparse.Namespace, root: Path, stdout: TextIO | None = None) -> int:
    try:
        from arena_ls.gates.check import main_check
    except ImportError as error:
        from arena_ls.client.errors import EXIT_FAILED, CliError

        raise CliError(f"arena check is not available in this build ({error})", EXIT_FAILED) from error
    linter = make_manifest_linter(root)
    return main_check(
        check_argv(args, root),
        stdout=stdout or sys.stdout,
        manifest_linter=linter,
        jobs_of=linter.jobs_of,
    )
