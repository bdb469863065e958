"""docs/trainer-guide.md's "Your trainer in five minutes": every example passes every gate.

Each ``python`` block of that section is a whole trainer (plain PyTorch, Hugging Face, Lightning,
Accelerate) and is linted as ``arena check --fp32-only`` would lint it (``lint_trainer``, the
gates' in-process API). The JSON blocks there are manifest jobs and must load with no error.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from arena_ls.gates import lint_trainer
from arena_ls.manifest import load_manifest_text

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "trainer-guide.md"
FIRST = "## Your trainer in five minutes"
AFTER = "## The hand-written way"


def five_minutes() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    assert text.index(FIRST) < 200, "the guide starts with its five-minute section"
    return text[text.index(FIRST) : text.index(AFTER)]


def blocks(language: str) -> list[tuple[str, str]]:
    """(the ### heading above it, the code) for each fenced block of ``language``."""
    found = []
    heading = ""
    for part in re.split(rf"(^### [^\n]*$|^```{language}\n.*?^```$)", five_minutes(), flags=re.M | re.S):
        if part.startswith("### "):
            heading = part[4:].strip()
        elif part.startswith(f"```{language}\n"):
            found.append((heading, part[len(language) + 4 : -3]))
    return found


EXAMPLES = blocks("python")


def test_there_is_an_example_for_each_way_of_training() -> None:
    headings = list(dict.fromkeys(heading for heading, _ in EXAMPLES))  # Lightning has two
    assert headings == ["Plain PyTorch", "Hugging Face `Trainer`", "Lightning", "Accelerate"]


@pytest.mark.parametrize(("heading", "code"), EXAMPLES, ids=[h.split()[0].strip("`") for h, _ in EXAMPLES])
def test_each_example_passes_every_gate(heading: str, code: str) -> None:
    ast.parse(code, feature_version=(3, 8))
    findings = lint_trainer(code, fp32_only=True)
    assert [f"{f.code} ({f.severity}) line {f.line + 1}: {f.message}" for f in findings] == []


def test_the_example_jobs_load(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    for _, code in blocks("json"):
        job = json.loads(code)
        result = load_manifest_text(
            json.dumps({"version": 1, "jobs": [job]}), tmp_path / "manifest.json", tmp_path
        )
        assert [d.code for d in result.diagnostics if d.severity == "error"] == []
