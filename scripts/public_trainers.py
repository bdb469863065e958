"""Measure the gates on public trainers: refused before, passing after the quick fixes alone.

    python scripts/public_trainers.py --mirrors DIR [--out FILE] [--keep DIR] [--kit]

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

``--kit`` measures the kit-call edits instead (``scripts/public_trainer_kit_edits.py``):
for each trainer that has them, the lines added or changed, how many of them
call the kit, and the error codes left when linted for a job with the
measurement's arguments (``kit_lines`` below; the test of the JSON compares).
"""

from __future__ import annotations

import argparse
import difflib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from arena_ls.gates import JobArgs, lint_trainer

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


def show(git_dir: Path, commit: str, path: str) -> str | None:
    shown = subprocess.run(
        ["git", "-C", str(git_dir), "show", f"{commit}:{path}"], capture_output=True, check=False
    )
    return shown.stdout.decode("utf-8", errors="replace") if shown.returncode == 0 else None


def replaced(source: str, edits: tuple[tuple[str, str], ...]) -> str:
    """``source`` with each excerpt replaced; an excerpt must occur exactly once."""
    for old, new in edits:
        found = source.count(old)
        if found != 1:
            raise ValueError(f"the excerpt {old[:60]!r} occurs {found} times, not once")
        source = source.replace(old, new)
    return source


def added_or_changed(before: str, after: str) -> list[str]:
    """The lines of ``after`` that ``before`` lacks (inserted or replaced, as difflib sees them)."""
    a, b = before.splitlines(), after.splitlines()
    found: list[str] = []
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            found.extend(b[j1:j2])
    return found


def calls_the_kit(line: str) -> bool:
    return "arena." in line or "import arena_trainer" in line


def kit_lines(mirrors: Path, item: dict[str, object]) -> dict[str, object] | None:
    """The kit-call edits' figures for one trainer, or None when it has none."""
    from public_trainer_kit_edits import KIT_EDITS

    path = str(item.get("kit_path") or item["path"])
    recipe = KIT_EDITS.get((str(item["repo"]), path))
    if recipe is None:
        return None
    source = show(mirrors / str(item["repo"]).replace("/", "+") / "repo", str(item["commit"]), path)
    if source is None:
        return {"repo": item["repo"], "path": path, "error": "not in the snapshot"}
    edited = replaced(source, recipe.edits)
    lines = added_or_changed(source, edited)
    jobs = (JobArgs("job", recipe.job_args),)
    left = sorted({f.code for f in lint_trainer(edited, fp32_only=True, jobs=jobs) if f.severity == "error"})
    return {
        "repo": item["repo"],
        "path": path,
        "lines": len(lines),
        "kit_call_lines": sum(1 for line in lines if calls_the_kit(line)),
        "job_args": list(recipe.job_args),
        "errors_after_kit_lines": left,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mirrors", type=Path, required=True)
    parser.add_argument("--keep", type=Path, help="write each trainer (and its quick-fixed copy) here")
    parser.add_argument("--kit", action="store_true", help="measure the kit-call edits instead")
    args = parser.parse_args()
    listed = json.loads(LIST.read_text(encoding="utf-8"))["trainers"]
    if args.kit:
        for item in listed:
            row = kit_lines(args.mirrors, item)
            if row is not None:
                print(json.dumps(row), flush=True)
        return 0
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
