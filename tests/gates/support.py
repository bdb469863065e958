"""Shared helpers for the gates tests."""

from __future__ import annotations

import json
import os
from pathlib import Path

from arena_ls.gates import Finding, TextEdit, lint_trainer

FIXTURES = Path(__file__).parent / "fixtures"
UPDATE_SNAPSHOTS = os.environ.get("ARENA_UPDATE_SNAPSHOTS") == "1"


def codes(source: str | bytes, *, fp32_only: bool | None = True) -> set[str]:
    return {finding.code for finding in lint_trainer(source, fp32_only=fp32_only)}


def only(findings: list[Finding], code: str) -> list[Finding]:
    return [finding for finding in findings if finding.code == code]


def apply_edits(source: str, edits: tuple[TextEdit, ...] | list[TextEdit]) -> str:
    """Apply non-overlapping edits (0-based lines, character columns), last first."""
    lines = source.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def offset(line: int, col: int) -> int:
        return offsets[line] + col if line < len(lines) else len(source)

    ordered = sorted(edits, key=lambda e: (e.line, e.col), reverse=True)
    for edit in ordered:
        start, end = offset(edit.line, edit.col), offset(edit.end_line, edit.end_col)
        source = source[:start] + edit.new_text + source[end:]
    return source


def snapshot_of(findings: list[Finding]) -> list[dict[str, object]]:
    """What a snapshot pins: code, 1-based line, severity."""
    return [{"code": f.code, "line": f.line + 1, "severity": f.severity} for f in findings]


def check_snapshot(path: Path, actual: list[dict[str, object]]) -> None:
    """Compare with the JSON snapshot next to the fixture; rewrite it when asked to."""
    snapshot = path.with_suffix(".json")
    if UPDATE_SNAPSHOTS or not snapshot.exists():
        if not UPDATE_SNAPSHOTS:
            raise AssertionError(f"no snapshot {snapshot.name}: run with ARENA_UPDATE_SNAPSHOTS=1")
        rows = ",\n".join("  " + json.dumps(item) for item in actual)
        snapshot.write_text(f"[\n{rows}\n]\n" if rows else "[]\n", encoding="utf-8")
        return
    expected = json.loads(snapshot.read_text(encoding="utf-8"))
    assert actual == expected, f"{path.name}: findings differ from {snapshot.name}"
