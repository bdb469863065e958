"""Every test the docs name exists: a promise in ``docs/`` points at the test that tries to break it,
and a test renamed (12 were, when "follower" stopped naming a run's agent) must take its citations
along. A name followed by ``*`` or ``...`` is a prefix (``test_ar110_*``: a family of tests)."""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CITED = re.compile(r"\b(test_[a-z0-9_]+)(\*|\.\.\.)?")
OUTSIDE = {
    "test_getpath": "CPython's own test module (docs/windows.md)",
    "test_venv_win32": "a test of CPython's test_getpath",
}
"""Names of tests that are not this repository's, cited as such."""
SOURCE_SUFFIXES = (".py", ".ts", ".mjs", ".js", ".lua", ".sh")
SKIPPED = {"node_modules", "__pycache__", "out", "dist", "build", "e2e-cache", ".vscode-test"}


def cited_tests() -> dict[str, tuple[bool, set[str]]]:
    """Cited name -> (is a prefix, the documents citing it)."""
    documents = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", REPO / "CONTRIBUTING.md"]
    found: dict[str, tuple[bool, set[str]]] = {}
    for document in documents:
        for match in CITED.finditer(document.read_text(encoding="utf-8")):
            prefix, places = found.get(match.group(1), (False, set()))
            found[match.group(1)] = (prefix or bool(match.group(2)), places | {document.name})
    return found


def defined_names() -> set[str]:
    """Test functions and test modules of the Python suite, the scripts and the editor clients."""
    names: set[str] = set()
    for folder in ("tests", "scripts", "editor-client"):
        for where, subfolders, files in os.walk(REPO / folder):
            subfolders[:] = [name for name in subfolders if name not in SKIPPED]
            for name in files:
                if name.endswith(SOURCE_SUFFIXES):
                    names.add(name.split(".")[0])
                    text = Path(where, name).read_text(encoding="utf-8", errors="replace")
                    names.update(re.findall(r"\b(test_[a-z0-9_]+)", text))
    return names


def test_every_cited_test_exists() -> None:
    names = defined_names()
    missing = [
        f"{name} ({', '.join(sorted(places))})"
        for name, (prefix, places) in sorted(cited_tests().items())
        if name not in OUTSIDE
        and name not in names
        and not (prefix and any(defined.startswith(name) for defined in names))
    ]
    assert missing == [], "cited in docs, defined nowhere (renamed? the docs follow)"


def test_the_check_sees_a_missing_name_and_a_prefix() -> None:
    assert CITED.search("`test_ar110_*`").group(2) == "*"  # type: ignore[union-attr]
    assert CITED.search("`test_racing_servers_...`").group(2) == "..."  # type: ignore[union-attr]
    names = defined_names()
    assert "test_every_cited_test_exists" in names
    assert "test_" + "nowhere_" * 2 + "defined" not in names  # built here, so written nowhere
