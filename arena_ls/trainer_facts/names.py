"""Small helpers that read names out of expressions."""

from __future__ import annotations

import ast


def call_name(call: ast.Call) -> str:
    """The last identifier of the called expression: ``torch.save(...)`` gives ``save``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def dotted(expr: ast.AST | None) -> str:
    """``torch.cuda.empty_cache`` for an attribute chain; calls read as ``f()``.

    Parts that are neither names, attributes, calls nor subscripts read as ``?``.
    """
    parts: list[str] = []
    node = expr
    while node is not None:
        if isinstance(node, ast.Name):
            parts.append(node.id)
            break
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            parts.append("()")
            node = node.func
        elif isinstance(node, ast.Subscript):
            parts.append("[]")
            node = node.value
        else:
            parts.append("?")
            break
    text = ""
    for part in reversed(parts):
        if part in ("()", "[]"):
            text += part
        else:
            text = f"{text}.{part}" if text else part
    return text


def receiver(call: ast.Call) -> ast.expr | None:
    """What a method is called on: ``optimizer`` in ``optimizer.step()``."""
    return call.func.value if isinstance(call.func, ast.Attribute) else None


def last_identifier(expr: ast.AST | None) -> str:
    """``optimizer`` for ``self.optimizer``; ``""`` when there is none."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    if isinstance(expr, ast.Call):
        return last_identifier(expr.func)
    return ""


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    """The value passed as ``name=`` to a call."""
    for item in call.keywords:
        if item.arg == name:
            return item.value
    return None


def keyword_node(call: ast.Call, name: str) -> ast.keyword | None:
    for item in call.keywords:
        if item.arg == name:
            return item
    return None


def argument(call: ast.Call, index: int, name: str) -> ast.expr | None:
    """A call's argument by keyword, else by position (``*args`` stops the count)."""
    value = keyword(call, name)
    if value is not None:
        return value
    for position, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            return None
        if position == index:
            return arg
    return None


def string_value(expr: ast.AST | None) -> str | None:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    return None


def is_true(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is True


def is_false(expr: ast.AST | None) -> bool:
    return isinstance(expr, ast.Constant) and expr.value is False
