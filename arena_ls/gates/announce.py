"""Whether a trainer tells the supervisor which step it saved (AR014).

A checkpoint is announced by an ``@arena {"event": "checkpoint", ...}`` line,
by a line the job's ``checkpoint.pattern`` matches, or (for a job without one)
by a line one of the supervisor's built-in checkpoint patterns matches
(``arena_ls.lifecycle.events.BUILTIN_CHECKPOINT_PATTERNS``: the gate and the
runtime read the same list, so they agree). The file's string literals are
rendered as the lines they would print (each ``{...}`` or ``%d`` becomes a
number) and matched against those patterns; docstrings do not count.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence

from arena_ls.gates.facts import ModuleFacts

_PLACEHOLDER = re.compile(r"%(?:\([^)]*\))?[-+ #0]*\d*(?:\.\d+)?[diouxXeEfFgGrsa]|\{[^{}]*\}")
_PRINTERS = frozenset({"print", "info", "warning", "debug", "log", "write", "echo", "secho",
                       "set_description", "set_postfix_str"})
_SAMPLE = "123"


def builtin_patterns() -> tuple[re.Pattern[str], ...]:
    """The supervisor's built-in checkpoint spellings (imported late: the runtime's module)."""
    from arena_ls.lifecycle.events import BUILTIN_CHECKPOINT_PATTERNS

    return BUILTIN_CHECKPOINT_PATTERNS


def announces_checkpoints(facts: ModuleFacts, job_patterns: Sequence[str]) -> bool:
    """True when some line the file prints announces a checkpoint the supervisor can read."""
    texts = list(_printed_texts(facts.tree))
    if _arena_announcement(texts):
        return True
    patterns: list[re.Pattern[str]] = []
    for raw in job_patterns:
        try:
            patterns.append(re.compile(raw))
        except re.error:
            continue  # the manifest linter reports a bad pattern
    if not patterns:  # the supervisor reads the built-in spellings only without a job pattern
        patterns.extend(builtin_patterns())
    return any(pattern.search(text) for text in texts for pattern in patterns)


def _arena_announcement(texts: list[str]) -> bool:
    """An ``@arena`` prefix somewhere, and the ``checkpoint`` event named somewhere."""
    has_prefix = any("@arena" in text for text in texts)
    names_event = any("checkpoint" in text and ('"event"' in text or text == "checkpoint")
                      for text in texts)
    return has_prefix and names_event


def _printed_texts(tree: ast.Module) -> Iterator[str]:
    docstrings = {id(node) for node in _docstrings(tree)}
    for node in ast.walk(tree):
        if id(node) in docstrings:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield _fill(node.value)
        elif isinstance(node, ast.JoinedStr) or (
                isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod))):
            text = render(node)
            if text:
                yield text
        elif isinstance(node, ast.Call) and len(node.args) > 1 and _is_printer(node):
            yield " ".join(render(arg) or _SAMPLE for arg in node.args)


def _is_printer(call: ast.Call) -> bool:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(
        func, ast.Attribute) else ""
    return name in _PRINTERS


def render(node: ast.expr) -> str:
    """The text an expression that builds a string would print, with numbers for values."""
    if isinstance(node, ast.Constant):
        return _fill(node.value) if isinstance(node.value, str) else _SAMPLE
    if isinstance(node, ast.JoinedStr):
        return "".join(render(part) if isinstance(part, ast.Constant) else _SAMPLE
                       for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return render(node.left) + render(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(
            node.left, ast.Constant) and isinstance(node.left.value, str):
        return _fill(node.left.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
            node.func.attr == "format" and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)):
        return _fill(node.func.value.value)
    return _SAMPLE


def _fill(text: str) -> str:
    return _PLACEHOLDER.sub(_SAMPLE, text)


def _docstrings(tree: ast.Module) -> Iterator[ast.AST]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                yield body[0].value
