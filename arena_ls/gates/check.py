"""``arena check [PATH...] [--format text|json] [--fp32-only]``: the gates in a terminal.

Lints the given ``.py`` files (a folder stands for the ``.py`` files under
it) and prints ``path:line:col: severity CODE message`` lines (1-based) and a
summary line (``2 errors, 1 warning in 1 file``, or ``all clean: 3 files``),
or a JSON array with ``--format json``. Manifests (``.json``) are the
manifest linter's: when the caller passes ``manifest_linter`` it lints them
and names their job scripts, which are then linted too; with no PATH it is
given ``training/manifest.json``. Exit status: 1 when any finding is an
error, 0 otherwise, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn, TextIO

from arena_ls.gates.engine import lint_trainer
from arena_ls.gates.model import Finding
from arena_ls.trainer_facts.job_args import JobArgs, trainer_arguments

ManifestLinter = Callable[[Path], tuple[list[tuple[Path, Finding]], list[Path]]]
"""Lints a manifest: its own findings (with the file each is in) and the scripts it names."""
JobsOf = Callable[[Path], list[tuple[str, tuple[str, ...], str | None]]]
"""The jobs of the manifests linted so far that run a script: ``(id, args, script)`` each (the
cadence rules judge the script for each job's arguments, as the server does)."""

DEFAULT_MANIFEST = Path("training") / "manifest.json"
_SKIPPED_DIRS = frozenset({".git", ".venv", "venv", "__pycache__", "node_modules", ".aide", "build", "dist"})


class UsageError(Exception):
    """Bad command-line arguments: exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def main_check(
    argv: list[str],
    *,
    stdout: TextIO,
    manifest_linter: ManifestLinter | None = None,
    jobs_of: JobsOf | None = None,
) -> int:
    """Run ``arena check`` with ``argv`` (the arguments after ``check``); return the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
        fp32_only = True if args.fp32_only else None
        results, checked = _collect(args.paths, manifest_linter, fp32_only=fp32_only, jobs_of=jobs_of)
    except UsageError as error:
        print(f"arena check: {error}", file=sys.stderr)
        return 2
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else 0
    _write(results, args.format, stdout)
    if args.format == "text":
        stdout.write(summary(results, checked) + "\n")
    return 1 if any(finding.severity == "error" for _path, finding in results) else 0


def _parser() -> _Parser:
    parser = _Parser(prog="arena check", description="Check trainer scripts against the arena gates.")
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="trainer .py files or folders (default: the manifest's scripts)",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--fp32-only",
        action="store_true",
        help="the GPU has no fast half precision: report mixed precision (AR011)",
    )
    return parser


def summary(results: list[tuple[Path, Finding]], checked: int) -> str:
    """``2 errors, 1 warning in 1 file`` (the files with findings), or ``all clean: 3 files``."""
    if not results:
        return f"all clean: {_plural(checked, 'file')}"
    counts = {"error": 0, "warning": 0, "information": 0}
    for _path, finding in results:
        counts[finding.severity] = counts.get(finding.severity, 0) + 1
    parts = [_plural(counts["error"], "error"), _plural(counts["warning"], "warning")]
    if counts["information"]:
        parts.append(f"{counts['information']} information")
    files = len({path.resolve() for path, _finding in results})
    return f"{', '.join(parts)} in {_plural(files, 'file')}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _collect(
    paths: list[str],
    manifest_linter: ManifestLinter | None,
    *,
    fp32_only: bool | None,
    jobs_of: JobsOf | None = None,
) -> tuple[list[tuple[Path, Finding]], int]:
    """The findings, and how many files were read (manifests and scripts)."""
    if not paths:
        if manifest_linter is None:
            raise UsageError("give at least one PATH")
        paths = [str(DEFAULT_MANIFEST)]
    results: list[tuple[Path, Finding]] = []
    scripts: list[Path] = []
    manifests = 0
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise UsageError(f"no such file or folder: {raw}")
        if path.is_dir():
            scripts.extend(_python_files(path))
        elif path.suffix == ".json":
            if manifest_linter is None:
                print(f"arena check: skipping manifest {raw} (checked by the server)", file=sys.stderr)
                continue
            manifest_findings, named = manifest_linter(path)
            manifests += 1
            results.extend(manifest_findings)
            scripts.extend(named)
        else:
            scripts.append(path)
    unique = _unique(scripts)
    for script in unique:
        jobs = tuple(
            JobArgs(job_id, trainer_arguments(args, script_arg))
            for job_id, args, script_arg in (jobs_of(script) if jobs_of is not None else [])
        )
        results.extend((script, finding) for finding in _lint_file(script, fp32_only, jobs))
    return results, manifests + len(unique)


def _python_files(folder: Path) -> list[Path]:
    found = []
    for path in sorted(folder.rglob("*.py")):
        if not _SKIPPED_DIRS & set(path.relative_to(folder).parts[:-1]):
            found.append(path)
    return found


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: set[Path] = set()
    ordered = []
    for path in paths:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            ordered.append(path)
    return ordered


def _lint_file(path: Path, fp32_only: bool | None, jobs: tuple[JobArgs, ...] = ()) -> list[Finding]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}") from error
    return lint_trainer(data, fp32_only=fp32_only, jobs=jobs)


def _write(results: list[tuple[Path, Finding]], fmt: str, stdout: TextIO) -> None:
    if fmt == "json":
        items = [
            {
                "path": str(path),
                "line": finding.line + 1,
                "col": finding.col + 1,
                "endLine": finding.end_line + 1,
                "endCol": finding.end_col + 1,
                "code": finding.code,
                "severity": finding.severity,
                "message": finding.message,
            }
            for path, finding in results
        ]
        stdout.write(json.dumps(items, indent=2) + "\n")
        return
    for path, finding in results:
        stdout.write(
            f"{path}:{finding.line + 1}:{finding.col + 1}: {finding.severity} "
            f"{finding.code} {finding.message}\n"
        )
