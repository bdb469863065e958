"""Keyword arguments passed through ``**kwargs``: where a key of the dict is set.

``DataLoader(ds, **train_kwargs)`` takes ``num_workers`` from a dict that may
be built over several lines: a literal, ``dict(...)``, ``{**a, **b}``,
``train_kwargs.update({...})`` or ``update(k=v)``, ``train_kwargs["k"] = v``,
often under a condition (``if use_cuda:``). A value set on any path counts:
each entry found carries the conditions it is set under, for the message.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator

from arena_ls.trainer_facts.facts import ModuleFacts, Scope, iter_statements
from arena_ls.trainer_facts.names import dotted, receiver, string_value

_MAX_DEPTH = 6


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Entry:
    """``key`` set to ``value`` at ``node``, under ``conditions`` (source text of ``if`` tests)."""

    value: ast.expr
    node: ast.AST
    scope: Scope
    conditions: tuple[str, ...]

    @property
    def path(self) -> str:
        """``set at line 12 when `use_cuda```, for messages."""
        line = getattr(self.node, "lineno", 0)
        when = " and ".join(f"`{test}`" for test in self.conditions)
        return f"set at line {line}" + (f" when {when}" if when else "")


def splat_entries(facts: ModuleFacts, expr: ast.expr, scope: Scope, key: str, depth: int = 0) -> list[Entry]:
    """Every place ``key`` is given a value in the dict that ``**expr`` passes."""
    if depth > _MAX_DEPTH:
        return []
    if isinstance(expr, ast.Dict):
        return list(_dict_literal(facts, expr, scope, key, depth))
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict":
        return list(_dict_call(facts, expr, scope, key, depth))
    if isinstance(expr, ast.Name):
        return list(_named_dict(facts, expr.id, scope, key, depth))
    return []


def _dict_literal(facts: ModuleFacts, node: ast.Dict, scope: Scope, key: str, depth: int) -> Iterator[Entry]:
    for dict_key, value in zip(node.keys, node.values, strict=False):
        if dict_key is None:
            yield from splat_entries(facts, value, scope, key, depth + 1)
        elif string_value(dict_key) == key:
            yield Entry(value, dict_key, scope, _conditions(scope, dict_key.lineno))


def _dict_call(facts: ModuleFacts, node: ast.Call, scope: Scope, key: str, depth: int) -> Iterator[Entry]:
    for arg in node.args:
        yield from splat_entries(facts, arg, scope, key, depth + 1)
    for item in node.keywords:
        if item.arg is None:
            yield from splat_entries(facts, item.value, scope, key, depth + 1)
        elif item.arg == key:
            yield Entry(item.value, item, scope, _conditions(scope, item.value.lineno))


def _named_dict(facts: ModuleFacts, name: str, scope: Scope, key: str, depth: int) -> Iterator[Entry]:
    current: Scope | None = scope
    while current is not None:
        assignments = current.assigns.get(name, [])
        for assignment in assignments:
            yield from splat_entries(facts, assignment.value, current, key, depth + 1)
        for item in current.item_assigns.get(name, []):
            if item.target == key:
                yield Entry(item.value, item.stmt, current, _conditions(current, item.stmt.lineno))
        for site in current.calls:
            if site.name == "update" and dotted(receiver(site.node)) == name:
                yield from _dict_call(facts, site.node, current, key, depth)
        if assignments:
            return
        current = current.parent


def _conditions(scope: Scope, line: int) -> tuple[str, ...]:
    """The tests of the ``if`` statements around ``line`` in the scope (outermost first)."""
    found: list[str] = []
    for stmt in iter_statements(getattr(scope.node, "body", [])):
        if isinstance(stmt, ast.If) and stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            in_body = bool(stmt.body) and stmt.body[0].lineno <= line <= (
                stmt.body[-1].end_lineno or stmt.body[-1].lineno
            )
            test = ast.unparse(stmt.test)
            test = test if len(test) <= 50 else test[:47] + "..."
            if in_body:
                found.append(test)
            elif stmt.orelse and stmt.orelse[0].lineno <= line:
                found.append(f"not ({test})")
    return tuple(found)
