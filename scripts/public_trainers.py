"""Measure the gates on public trainers: refused before, passing after the quick fixes alone.

    python scripts/public_trainers.py --mirrors DIR [--out FILE] [--keep DIR]

``DIR/owner+name/repo`` are git directories of the repositories named in
``tests/gates/public_trainers.json`` (the ``fetch`` tool's snapshots). Each
trainer is read with ``git show COMMIT:PATH`` into a temporary folder outside
the repository (never committed), linted as ``arena check --fp32-only`` does,
then its quick fixes (every finding's fix the gates offer: the kit's callback,
the --resume/--start-step options, an @arena announcement, num_workers=0) are
applied one at a time, re-linting after each, until none is left. Prints one
JSON object a trainer: the error codes before, and after the quick fixes.

Run it with the interpreter whose ``arena_ls`` is to be measured (main's
checkout for the "before" figures, this one for the "after").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from arena_ls.gates import lint_trainer

LIST = Path(__file__).resolve().parent.parent / "tests" / "gates" / "public_trainers.json"
MAX_FIXES = 30


def apply_edits(source: str, edits: tuple[object, ...]) -> str:
    """Apply a finding's edits (0-based lines, character columns), last first."""
    lines = source.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def offset(line: int, col: int) -> int:
        return offsets[line] + col if line < len(lines) else len(source)

    for edit in sorted(edits, key=lambda e: (e.line, e.col), reverse=True):  # type: ignore[attr-defined]
        start = offset(edit.line, edit.col)  # type: ignore[attr-defined]
        end = offset(edit.end_line, edit.end_col)  # type: ignore[attr-defined]
        source = source[:start] + edit.new_text + source[end:]  # type: ignore[attr-defined]
    return source


def errors(source: str) -> list[str]:
    return sorted({f.code for f in lint_trainer(source, fp32_only=True) if f.severity == "error"})


def quick_fixed(source: str) -> tuple[str, list[str]]:
    """The source after every quick fix the gates offer, and the titles applied."""
    applied: list[str] = []
    for _ in range(MAX_FIXES):
        fixable = [f for f in lint_trainer(source, fp32_only=True) if f.edits and f.fix_title]
        if not fixable:
            break
        finding = fixable[0]
        source = apply_edits(source, finding.edits)
        applied.append(f"{finding.code}: {finding.fix_title}")
    return source, applied


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirrors", type=Path, required=True)
    parser.add_argument("--keep", type=Path, help="write each trainer (and its quick-fixed copy) here")
    args = parser.parse_args()
    listed = json.loads(LIST.read_text(encoding="utf-8"))["trainers"]
    with tempfile.TemporaryDirectory(prefix="public-trainers-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for item in listed:
            git_dir = args.mirrors / item["repo"].replace("/", "+") / "repo"
            shown = subprocess.run(
                ["git", "-C", str(git_dir), "show", f"{item['commit']}:{item['path']}"],
                capture_output=True,
                check=False,
            )
            if shown.returncode != 0:
                print(json.dumps({**item, "error": shown.stderr.decode(errors="replace").strip()}))
                continue
            source = shown.stdout.decode("utf-8", errors="replace")
            name = f"{item['repo'].replace('/', '+')}+{item['path'].replace('/', '+')}"
            (folder / name).write_text(source, encoding="utf-8")
            fixed, applied = quick_fixed(source)
            (folder / f"fixed+{name}").write_text(fixed, encoding="utf-8")
            row = {
                "repo": item["repo"],
                "path": item["path"],
                "style": item["style"],
                "errors": errors(source),
                "after_quick_fixes": errors(fixed),
                "fixes": applied,
            }
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
