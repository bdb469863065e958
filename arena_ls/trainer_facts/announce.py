"""Whether a trainer tells the supervisor which step it saved (AR014).

A checkpoint is announced by an ``@arena {"event": "checkpoint", ...}`` line,
by a line the job's ``checkpoint.pattern`` matches, or (for a job without one)
by a line one of the supervisor's built-in checkpoint patterns matches
(``arena_ls.lifecycle.checkpoint_lines.BUILTIN_CHECKPOINT_PATTERNS``: the
gate and the runtime's event parser read the same tuple, so they agree). The
strings the file passes to calls or assigns are rendered as the lines they
would print (each ``{...}`` or ``%d`` becomes a number) and matched against
those patterns; docstrings and comments do not count.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterator, Sequence

from arena_ls.trainer_facts.facts import CallSite, ModuleFacts
from arena_ls.trainer_facts.patterns import lazy

_PLACEHOLDER = lazy(r"%(?:\([^)]*\))?[-+ #0]*\d*(?:\.\d+)?[diouxXeEfFgGrsa]|\{[^{}]*\}")
_PRINTERS = frozenset(
    {
        "print",
        "info",
        "warning",
        "debug",
        "log",
        "write",
        "echo",
        "secho",
        "set_description",
        "set_postfix_str",
    }
)
_SAMPLE = "123"


def builtin_patterns() -> tuple[re.Pattern[str], ...]:
    """The supervisor's built-in checkpoint spellings (imported when a file needs them)."""
    from arena_ls.lifecycle.checkpoint_lines import BUILTIN_CHECKPOINT_PATTERNS

    return BUILTIN_CHECKPOINT_PATTERNS


def announces_checkpoints(facts: ModuleFacts, job_patterns: Sequence[str], text: str = "") -> bool:
    """True when some line the file prints announces a checkpoint the supervisor can read."""
    from arena_ls.lifecycle.checkpoint_lines import mentions_checkpoint  # the supervisor's own test

    if text and not job_patterns and "@arena" not in text and not mentions_checkpoint(text):
        return False  # nothing could match: no need to read the strings
    lines = None if job_patterns or not text else _lines_mentioning(text)
    return _announces(list(_printed_texts(facts, lines)), job_patterns)


def announced_by(sites: Sequence[CallSite], job_patterns: Sequence[str]) -> bool:
    """True when one of these calls prints a line announcing a checkpoint (AR014's periodic look)."""
    texts = [text for site in sites for text in _call_texts(site.node)]
    return _announces(texts, job_patterns)


def _announces(texts: list[str], job_patterns: Sequence[str]) -> bool:
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
    return any(pattern.search(line) for line in texts for pattern in patterns)


def _arena_announcement(texts: list[str]) -> bool:
    """An ``@arena`` prefix somewhere, and the ``checkpoint`` event named somewhere."""
    has_prefix = any("@arena" in text for text in texts)
    names_event = any("checkpoint" in text and ('"event"' in text or text == "checkpoint") for text in texts)
    return has_prefix and names_event


_MENTION = lazy(r"@arena|checkpoint", re.IGNORECASE)


def _lines_mentioning(text: str) -> set[int]:
    """1-based lines that mention ``@arena`` or a checkpoint: only they can announce one."""
    found: set[int] = set()
    counted_to, line = 0, 1
    for match in _MENTION.finditer(text):
        line += text.count("\n", counted_to, match.start())
        counted_to = match.start()
        found.add(line)
    return found


def _printed_texts(facts: ModuleFacts, lines: set[int] | None = None) -> Iterator[str]:
    """The strings passed to calls (``print``, ``logger.info``, a helper) and assigned to names.

    Read from the call sites and assignments the walk recorded, so docstrings
    (which are neither) never count and the tree is not walked again. With
    ``lines``, only calls and assignments that span one of them are read.
    """

    ordered = sorted(lines) if lines is not None else []

    def spans(node: ast.AST) -> bool:
        if lines is None:
            return True
        start = getattr(node, "lineno", 0)
        end = getattr(node, "end_lineno", None) or start
        index = bisect.bisect_left(ordered, start)
        return index < len(ordered) and ordered[index] <= end

    for site in facts.calls:
        if spans(site.node):
            yield from _call_texts(site.node)
    for scope in facts.scopes:
        for assignments in scope.assigns.values():
            for assignment in assignments:
                if spans(assignment.value):
                    yield from _strings_in(assignment.value)


def _call_texts(call: ast.Call) -> Iterator[str]:
    """The strings a call passes (and, for a printer of several arguments, the line it prints)."""
    values = [*call.args, *(item.value for item in call.keywords)]
    for value in values:
        yield from _strings_in(value)
    if len(call.args) > 1 and _is_printer(call):
        yield " ".join(render(arg) for arg in call.args)


def _strings_in(expr: ast.expr) -> Iterator[str]:
    if isinstance(expr, ast.Constant):
        if isinstance(expr.value, str):
            yield _fill(expr.value)
        return
    if isinstance(expr, (ast.JoinedStr, ast.BinOp)):
        text = render(expr)
        if text:
            yield text
    for child in ast.iter_child_nodes(expr):
        if isinstance(child, ast.expr) and not isinstance(child, ast.Call):
            yield from _strings_in(child)


def _is_printer(call: ast.Call) -> bool:
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    return name in _PRINTERS


def render(node: ast.expr) -> str:
    """The text an expression that builds a string would print, with numbers for values."""
    if isinstance(node, ast.Constant):
        return _fill(node.value) if isinstance(node.value, str) else _SAMPLE
    if isinstance(node, ast.JoinedStr):
        return "".join(render(part) if isinstance(part, ast.Constant) else _SAMPLE for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return render(node.left) + render(node.right)
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Mod)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, str)
    ):
        return _fill(node.left.value)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and (
            node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)
        )
    ):
        return _fill(node.func.value.value)
    return _SAMPLE


def _fill(text: str) -> str:
    return _PLACEHOLDER.sub(_SAMPLE, text)
