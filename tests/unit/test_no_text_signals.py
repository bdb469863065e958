"""No module reads the supervisor's words: what an agent tells the servers is a typed record.

The agents write ``agent_records`` records; readers act on their ``kind``. The words
(``TRAINING_CRASHED: tiny-lm code -9``, ``restarting from step 500 ...``) live in that one
module's renderer, and its reader of earlier agents' plain lines, and nowhere else: a
module that writes them itself, or matches a line against them, is found here (as
``test_layers.py`` finds imports). Docstrings may name the words; code may not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.sources import nodes, parsed

pytestmark = pytest.mark.xdist_group("sources")  # one worker parses them once (helpers/sources.py)

PACKAGE = Path(__file__).resolve().parents[2] / "arena_ls"
THE_ONE_MODULE = PACKAGE / "run" / "agent_records.py"

WORDING = ("TRAINING_CRASHED", "restarting from", "submitting to cluster", "from scratch (no checkpoint")
"""The agents' own wording: in a string of code anywhere else, it is being written or matched."""
MARKERS = ("warning:", "starting ", "restarting ", "TRAINING_CRASHED", "submitting to", "failure: ",
           "crash loop:", "stopped (by", "run ended:", "job exited", "job was killed")  # fmt: skip
"""Beginnings of supervisor lines: a line compared with (or tested for) one is being pattern-matched."""
TESTS = ("startswith", "endswith", "match", "fullmatch", "search", "find", "index", "count")


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            found.update(
                id(statement.value)
                for statement in node.body
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            )
    return found


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        value = node.value
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


def _constants(node: ast.AST) -> list[str]:
    """The string constants an argument is made of (a tuple of them, too)."""
    if isinstance(node, ast.Tuple):
        return [text for element in node.elts if (text := _text(element)) is not None]
    text = _text(node)
    return [text] if text is not None else []


def _marked(text: str, bare_warning: bool) -> bool:
    return text.startswith(MARKERS) or (bare_warning and text.startswith("warning"))


def text_signals(path: Path) -> list[str]:
    """``line: what`` for each place in ``path`` that writes or matches the supervisor's words."""
    tree = parsed(path)
    docstrings = _docstrings(tree)
    found: list[str] = []
    for node in nodes(path):
        text = _text(node)
        if text is not None and id(node) not in docstrings and any(word in text for word in WORDING):
            found.append(f"{node.lineno}: the agents' wording {text[:40]!r}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TESTS:
            for argument in node.args:
                found += [f"{node.lineno}: .{node.func.attr}({t[:40]!r})" for t in _constants(argument)
                          if _marked(t, bare_warning=True)]  # fmt: skip
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                found += [f"{node.lineno}: compared with {t[:40]!r}" for t in _constants(operand)
                          if _marked(t, bare_warning=False)]  # fmt: skip
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, bytes)
            and _marked(_text(node) or "", True)
        ):
            found.append(f"{node.lineno}: bytes {node.value[:40]!r}")
    return found


def test_no_module_pattern_matches_or_writes_supervisor_text() -> None:
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{where}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != THE_ONE_MODULE
        for where in text_signals(path)
    ]
    assert offending == []


def test_the_one_module_holds_the_words() -> None:
    """The check looks where the words are: the renderer holds them (else the test above is empty)."""
    assert any("TRAINING_CRASHED" in where for where in text_signals(THE_ONE_MODULE))


def test_the_checker_finds_every_way_of_matching_text(tmp_path: Path) -> None:
    """Each way today's main matched supervisor lines is found (the test above can fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""A docstring may say TRAINING_CRASHED."""\n'
        'def kind(text, data, line):\n'
        '    if text.startswith(("warning", "TRAINING_CRASHED")):\n'
        '        return 2\n'
        '    if data.startswith(b"starting "):\n'
        '        return 1\n'
        '    if line.text == "stopped (by file)":\n'
        '        return 3\n'
        '    return f"restarting from step {text}"\n'
    )  # fmt: skip
    found = text_signals(probe)
    assert sorted({where.split(":")[0] for where in found}) == ["3", "5", "7", "9"], found
    assert any(".startswith('warning')" in where for where in found), "a bare 'warning' prefix too"
