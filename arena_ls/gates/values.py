"""What a name, attribute or option stands for: constants, config fields, argparse defaults.

Cadences (``step % N``) and ``num_workers`` are written as literals, module
constants (that a config file may override later), config attributes,
``args.x`` from argparse (``--ckpt-every`` becomes ``args.ckpt_every``) or
function defaults. ``Resolver.resolve`` follows those one step at a time and
says where the value came from, or that it could not tell.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable

import attrs

from arena_ls.gates.facts import Assignment, ModuleFacts, Scope
from arena_ls.gates.names import call_name, keyword, last_identifier, string_value

_MAX_DEPTH = 12


@attrs.frozen
class ArgOption:
    """One ``add_argument`` call with option strings (positionals are left out)."""

    flags: tuple[str, ...]
    dest: str
    call: ast.Call
    default: ast.expr | None
    action: str | None


@attrs.frozen
class Value:
    """A resolved value; ``known`` is False when the analysis cannot tell.

    ``node`` is the literal it came from, where there is one (a quick fix may
    edit it); ``origin`` says where it came from, for messages; ``positive``
    marks values that are unknown but surely above zero (``os.cpu_count()``).
    """

    known: bool
    value: object = None
    origin: str = ""
    node: ast.expr | None = None
    positive: bool = False

    def as_int(self) -> int | None:
        """The value as an int (digits in a string count), or None."""
        if not self.known:
            return None
        value = self.value
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
        return None


UNKNOWN = Value(known=False)


def collect_options(facts: ModuleFacts) -> dict[str, ArgOption]:
    """argparse options by ``dest``; the first definition of a dest wins."""
    options: dict[str, ArgOption] = {}
    for site in facts.calls_named("add_argument"):
        flags = tuple(
            text for text in (string_value(arg) for arg in site.node.args) if text is not None
        )
        if not flags or not all(flag.startswith("-") for flag in flags):
            continue
        dest = string_value(keyword(site.node, "dest")) or _dest_from_flags(flags)
        action = string_value(keyword(site.node, "action"))
        options.setdefault(
            dest,
            ArgOption(flags=flags, dest=dest, call=site.node,
                      default=keyword(site.node, "default"), action=action),
        )
    return options


def _dest_from_flags(flags: tuple[str, ...]) -> str:
    long = [flag for flag in flags if flag.startswith("--")]
    chosen = long[0] if long else flags[0]
    return chosen.lstrip("-").replace("-", "_")


def _set_defaults(facts: ModuleFacts) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for site in facts.calls_named("set_defaults"):
        for item in site.node.keywords:
            if item.arg:
                found[item.arg] = item.value
    return found


class Resolver:
    """Resolves expressions of one module to values."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.options = collect_options(facts)
        self.option_overrides = _set_defaults(facts)
        self._active: set[int] = set()

    def resolve(self, expr: ast.expr | None, scope: Scope, line: int | None = None) -> Value:
        """The value of ``expr`` as seen from ``scope`` at 1-based ``line``."""
        if expr is None or len(self._active) > _MAX_DEPTH or id(expr) in self._active:
            return UNKNOWN
        self._active.add(id(expr))
        try:
            at = line if line is not None else getattr(expr, "lineno", 0)
            return self._resolve(expr, scope, at)
        finally:
            self._active.discard(id(expr))

    def _resolve(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        if isinstance(expr, ast.Constant):
            return Value(known=True, value=expr.value, node=expr)
        handler = _HANDLERS.get(type(expr))
        if handler is None:
            return UNKNOWN
        return handler(self, expr, scope, line)

    # names ---------------------------------------------------------------------

    def _name(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.Name)
        name = expr.id
        current: Scope | None = scope
        while current is not None:
            if current.kind == "class":
                current = current.parent
                continue
            assignment = self.assignment_before(current, name, line if current is scope else 0)
            if assignment is not None:
                return self._from_assignment(assignment)
            params = current.params()
            if name in params:
                default = params[name]
                if default is None:
                    return Value(known=False, origin=f"parameter {name}")
                value = self.resolve(default, current.parent or current)
                where = f"the default of parameter {name} at line {default.lineno}"
                return _with_origin(value, where)
            current = current.parent
        return Value(known=False, origin=name)

    def assignment_before(self, scope: Scope, name: str, line: int) -> Assignment | None:
        """The last assignment to ``name`` in ``scope`` before ``line`` (else the last one).

        ``line <= 0`` asks for the last one: a function runs after the module body
        has run, so the module's last assignment is the one it sees.
        """
        assignments = scope.assigns.get(name)
        if not assignments:
            return None
        if line <= 0:
            return assignments[-1]
        before = [item for item in assignments if item.stmt.lineno < line]
        return before[-1] if before else assignments[-1]

    def _from_assignment(self, assignment: Assignment) -> Value:
        value = self.resolve(assignment.value, assignment.scope, assignment.stmt.lineno)
        where = f"{assignment.target} at line {assignment.stmt.lineno}"
        return _with_origin(value, where) if value.known else attrs.evolve(value, origin=where)

    # attributes and items -------------------------------------------------------

    def _attribute(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.Attribute)
        option = self.options.get(expr.attr)
        if option is not None:
            return self.option_default(option)
        for info in self.facts.classes.values():
            values = info.attributes.get(expr.attr)
            if values:
                value = self.resolve(values[-1], info.scope)
                return _with_origin(
                    value, f"{info.node.name}.{expr.attr} at line {values[-1].lineno}")
        assignments = self.facts.attr_assigns.get(expr.attr, [])
        resolved = [self._from_assignment(item) for item in assignments]
        known = [value for value in resolved if value.known]
        if known and len({repr(value.value) for value in known}) == 1 and len(known) == len(
                resolved):
            return known[-1]
        return Value(known=False, origin=_describe(expr))

    def option_default(self, option: ArgOption) -> Value:
        flag = next((f for f in option.flags if f.startswith("--")), option.flags[0])
        origin = f"the default of {flag} at line {option.call.lineno}"
        override = self.option_overrides.get(option.dest)
        default = override if override is not None else option.default
        if default is None:
            implied = {"store_true": False, "store_false": True}.get(option.action or "")
            return Value(known=True, value=implied, origin=origin, node=None)
        value = self.resolve(default, self.facts.module)
        return attrs.evolve(value, origin=origin)

    def _subscript(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.Subscript)
        key = string_value(expr.slice)
        if key is None:
            return UNKNOWN
        return self.item(expr.value, key, scope, line)

    def item(self, container: ast.expr, key: str, scope: Scope, line: int) -> Value:
        """``container[key]`` where the container is a dict literal or built item by item."""
        if isinstance(container, ast.Dict):
            for dict_key, dict_value in zip(container.keys, container.values, strict=False):
                if string_value(dict_key) == key:
                    return self.resolve(dict_value, scope, line)
            return UNKNOWN
        if not isinstance(container, ast.Name):
            return UNKNOWN
        current: Scope | None = scope
        while current is not None:
            for item in reversed(current.item_assigns.get(container.id, [])):
                if item.target == key:
                    return self._from_assignment(item)
            assignment = self.assignment_before(current, container.id, line)
            if assignment is not None and isinstance(assignment.value, ast.Dict):
                return self.item(assignment.value, key, assignment.scope, assignment.stmt.lineno)
            current = current.parent
        return UNKNOWN

    # calls and arithmetic ------------------------------------------------------

    def _call(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.Call)
        name = call_name(expr)
        if name in ("int", "float", "round") and len(expr.args) == 1:
            inner = self.resolve(expr.args[0], scope, line)
            number = inner.as_int()
            if inner.known and inner.value is None:
                return inner
            return attrs.evolve(inner, value=number, known=number is not None)
        if name == "cpu_count":
            return Value(known=False, origin="os.cpu_count()", positive=True)
        if name in ("min", "max") and expr.args and not expr.keywords:
            return self._min_max(expr, scope, line)
        if name == "get" and isinstance(expr.func, ast.Attribute) and expr.args:
            key = string_value(expr.args[0])
            if key is not None:
                found = self.item(expr.func.value, key, scope, line)
                if found.known:
                    return found
                if len(expr.args) > 1:
                    return self.resolve(expr.args[1], scope, line)
                return Value(known=True, value=None, origin=f"{key} (no default)")
        if name == "getattr" and len(expr.args) >= 2:
            attr = string_value(expr.args[1])
            if attr is not None:
                fake = ast.Attribute(value=expr.args[0], attr=attr, ctx=ast.Load())
                found = self._attribute(fake, scope, line)
                if found.known or len(expr.args) < 3:
                    return found
                return self.resolve(expr.args[2], scope, line)
        if name == "field":
            default = keyword(expr, "default")
            if default is not None:
                return self.resolve(default, scope, line)
        return Value(known=False, origin=f"{last_identifier(expr.func)}(...)")

    def _min_max(self, expr: ast.Call, scope: Scope, line: int) -> Value:
        values = [self.resolve(arg, scope, line) for arg in expr.args]
        numbers = [value.as_int() for value in values]
        if all(number is not None for number in numbers) and numbers:
            pick = min if call_name(expr) == "min" else max
            return Value(known=True, value=pick(n for n in numbers if n is not None))
        positive = call_name(expr) == "max" and any((n or 0) > 0 for n in numbers)
        positive = positive or (call_name(expr) == "min" and all(
            (v.positive or (n or 0) > 0) for v, n in zip(values, numbers, strict=True)))
        return Value(known=False, origin=f"{call_name(expr)}(...)", positive=positive)

    def _binop(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.BinOp)
        function = _BINARY.get(type(expr.op))
        left = self.resolve(expr.left, scope, line).as_int()
        right = self.resolve(expr.right, scope, line).as_int()
        if function is None or left is None or right is None:
            return UNKNOWN
        if isinstance(expr.op, (ast.FloorDiv, ast.Mod)) and right == 0:
            return UNKNOWN
        if isinstance(expr.op, ast.Pow) and (right > 64 or right < 0):
            return UNKNOWN
        return Value(known=True, value=function(left, right))

    def _unary(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.UnaryOp)
        inner = self.resolve(expr.operand, scope, line)
        number = inner.as_int()
        if isinstance(expr.op, ast.USub) and number is not None:
            return Value(known=True, value=-number, origin=inner.origin)
        if isinstance(expr.op, ast.Not) and inner.known:
            return Value(known=True, value=not inner.value, origin=inner.origin)
        return UNKNOWN

    def _ifexp(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.IfExp)
        first = self.resolve(expr.body, scope, line)
        second = self.resolve(expr.orelse, scope, line)
        if first.known and second.known and first.value == second.value:
            return first
        return UNKNOWN


def _with_origin(value: Value, origin: str) -> Value:
    return attrs.evolve(value, origin=value.origin or origin)


def _describe(expr: ast.expr) -> str:
    try:
        return ast.unparse(expr)
    except Exception:  # pragma: no cover - unparse handles every parsed expression
        return "the value"


_BINARY: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}

_HANDLERS: dict[type, Callable[[Resolver, ast.expr, Scope, int], Value]] = {
    ast.Name: Resolver._name,
    ast.Attribute: Resolver._attribute,
    ast.Subscript: Resolver._subscript,
    ast.Call: Resolver._call,
    ast.BinOp: Resolver._binop,
    ast.UnaryOp: Resolver._unary,
    ast.IfExp: Resolver._ifexp,
}
