"""What a name, attribute or option stands for: constants, config fields, argparse defaults.

Cadences (``step % N``) and ``num_workers`` are written as literals, module
constants (that a config file may override later), config attributes,
``args.x`` from argparse (``--ckpt-every`` becomes ``args.ckpt_every``),
function parameters (the arguments of the same-file calls of the function,
else its default), and fields of same-file dataclass or attrs instances (the
keyword given to the constructor, else the field's default, through nested
config objects such as ``args.eval.interval``), and the keywords given to a config
class imported from another module (litgpt's ``EvalArgs(interval=1000)``). ``Resolver.resolve`` follows
those one step at a time and says where the value came from, or which name
it could not resolve and why.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import operator
from collections.abc import Callable

from arena_ls.trainer_facts.cli_options import ArgOption, collect_options, configurator_line, set_defaults
from arena_ls.trainer_facts.facts import Assignment, ClassInfo, ModuleFacts, Scope
from arena_ls.trainer_facts.job_args import JobArgs, literal
from arena_ls.trainer_facts.names import call_name, dotted, keyword, last_identifier, string_value

_MAX_DEPTH = 12


@dataclasses.dataclass(frozen=True, slots=True)
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
    counted_by: str = ""
    """The call that makes an unknown value positive, as written (``multiprocessing.cpu_count()``)."""

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


class Resolver:
    """Resolves expressions of one module to values.

    ``job``: the arguments of the manifest job the trainer is judged for; an
    option (or a nanoGPT global) the job sets resolves to the job's value.
    """

    def __init__(self, facts: ModuleFacts, job: JobArgs | None = None) -> None:
        self.facts = facts
        self.job = job
        self.options = collect_options(facts)
        self.option_overrides = set_defaults(facts)
        self.configurator = configurator_line(facts)
        self.consulted: set[str] = set()
        """The options (``option DEST``) and configurator globals (``global NAME``) read so far:
        what a job's arguments could change in what was resolved."""
        self._active: set[int] = set()
        self._imported: dict[str, ClassInfo] = {}

    def for_job(self, job: JobArgs | None) -> Resolver:
        """A resolver of the same module that reads ``job``'s arguments (the options and the
        configurator found once are shared)."""
        resolver = copy.copy(self)
        resolver.job = job
        resolver.consulted = set()
        resolver._active = set()
        return resolver

    def settings_of(self, job: JobArgs, consulted: set[str]) -> tuple[tuple[str, str], ...]:
        """What ``job``'s arguments set of the options and configurator globals in ``consulted``.

        ``consulted`` are those a rule read (``self.consulted`` after it judged the
        defaults): two jobs that set them alike are judged alike, whatever else their
        arguments say (a sweep over the learning rate is judged once).
        """
        found: list[tuple[str, str]] = []
        for key in sorted(consulted):
            kind, _space, name = key.partition(" ")
            value: str | None = None
            if kind == "option" and name in self.options:
                option = self.options[name]
                given = job.option_value(option.flags)
                value = given[1] if given else job.flag_given(option.flags)
            elif kind == "global":
                value = job.configurator_value(name)
            if value is not None:
                found.append((key, value))
        return tuple(found)

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
                return self._parameter(current, name, params[name])
            current = current.parent
        return Value(known=False, origin=name)

    def _parameter(self, function: Scope, name: str, default: ast.expr | None) -> Value:
        """A parameter: what the same-file calls pass for it, else its default."""
        passed = self.call_arguments(function, name)
        if passed:
            values = [(self.resolve(arg, caller, arg.lineno), arg) for arg, caller in passed]
            known = [(value, arg) for value, arg in values if value.known]
            if len(known) == len(values) and len({repr(v.value) for v, _a in known}) == 1:
                value, arg = known[0]
                return _with_origin(value, f"parameter {name}, passed at line {arg.lineno}")
            unknown = next(((value, arg) for value, arg in values if not value.known), None)
            if unknown is not None:
                value, arg = unknown
                why = f" ({value.origin} is not known here)" if value.origin else ""
                return Value(
                    known=False,
                    origin=f"parameter {name}, passed `{_describe(arg)}` at line {arg.lineno}{why}",
                )
            lines = ", ".join(str(arg.lineno) for _value, arg in values)
            return Value(known=False, origin=f"parameter {name}, given different values at lines {lines}")
        if default is None:
            return Value(
                known=False, origin=f"parameter {name}, which has no default and no same-file caller"
            )
        value = self.resolve(default, function.parent or function)
        where = f"the default of parameter {name} at line {default.lineno}"
        return _with_origin(value, where)

    def call_arguments(self, function: Scope, name: str) -> list[tuple[ast.expr, Scope]]:
        """The argument each same-file call of ``function`` passes for parameter ``name``."""
        if function.kind != "function":
            return []
        positional = function.positional_params()
        method = bool(positional) and positional[0] in ("self", "cls")
        found: list[tuple[ast.expr, Scope]] = []
        for site in self.facts.calls:
            if site.name != function.name or site.scope is function:
                continue
            call = site.node
            if isinstance(call.func, ast.Name) == method:
                continue  # a plain call of a method name, or a method call of a function name
            arg = keyword(call, name)
            if arg is None and name in positional:
                index = positional.index(name) - (1 if method else 0)
                if 0 <= index < len(call.args) and not any(
                    isinstance(item, ast.Starred) for item in call.args[: index + 1]
                ):
                    arg = call.args[index]
            if arg is not None:
                found.append((arg, site.scope))
        return found

    def instance_of(
        self, expr: ast.expr, scope: Scope, line: int, depth: int = 0
    ) -> tuple[ClassInfo, ast.Call | None] | None:
        """The same-file class an expression is an instance of, and its constructor call."""
        if depth > 6:
            return None
        if isinstance(expr, ast.Call):
            name = call_name(expr)
            info = self.facts.classes.get(name) if isinstance(expr.func, ast.Name) else None
            if info is None and isinstance(expr.func, ast.Name):
                info = self._imported_class(name)
            if info is not None:
                return info, expr
            if name in ("field", "ib", "attrib", "Factory"):
                factory = (
                    keyword(expr, "default_factory")
                    or keyword(expr, "factory")
                    or (expr.args[0] if name == "Factory" and expr.args else None)
                )
                if isinstance(factory, ast.Name) and factory.id in self.facts.classes:
                    return self.facts.classes[factory.id], None
                default = keyword(expr, "default")
                if default is not None:
                    return self.instance_of(default, scope, line, depth + 1)
            return None
        if isinstance(expr, ast.Name):
            return self._instance_of_name(expr.id, scope, line, depth)
        if isinstance(expr, ast.Attribute):
            owner = self.instance_of(expr.value, scope, line, depth + 1)
            if owner is None:
                return None
            info, call = owner
            given = keyword(call, expr.attr) if call is not None else None
            if given is not None:
                return self.instance_of(given, scope, line, depth + 1)
            defaults = info.attributes.get(expr.attr)
            if defaults:
                return self.instance_of(defaults[-1], info.scope, defaults[-1].lineno, depth + 1)
        return None

    def _imported_class(self, name: str) -> ClassInfo | None:
        """A config class imported from another module (litgpt's ``EvalArgs``): its keywords only.

        Its body is in another file, so only the keywords given to its
        constructor here are known (``EvalArgs(interval=1000).interval`` is
        1000); a field not given stays unknown. Only a capitalised name that
        ``from ... import`` brought in counts.
        """
        if name not in self.facts.imported_names or not name[:1].isupper():
            return None
        known = self._imported.get(name)
        if known is None:
            node = ast.ClassDef(name=name, bases=[], keywords=[], body=[], decorator_list=[])
            known = self._imported[name] = ClassInfo(node=node, scope=self.facts.module, bases=[])
        return known

    def _instance_of_name(
        self, name: str, scope: Scope, line: int, depth: int
    ) -> tuple[ClassInfo, ast.Call | None] | None:
        current: Scope | None = scope
        while current is not None:
            assignment = self.assignment_before(current, name, line if current is scope else 0)
            if assignment is not None:
                return self.instance_of(assignment.value, assignment.scope, assignment.stmt.lineno, depth + 1)
            params = current.params()
            if name in params:
                for arg, caller in self.call_arguments(current, name):
                    found = self.instance_of(arg, caller, arg.lineno, depth + 1)
                    if found is not None:
                        return found
                default = params[name]
                if default is not None:
                    found = self.instance_of(default, current.parent or current, line, depth + 1)
                    if found is not None:
                        return found
                annotation = _annotation(current, name)
                if annotation in self.facts.classes:
                    return self.facts.classes[annotation], None
                return None
            current = current.parent
        return None

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
        overridden = self._configured(assignment)
        if overridden is not None:
            return overridden
        value = self.resolve(assignment.value, assignment.scope, assignment.stmt.lineno)
        where = f"{assignment.target} at line {assignment.stmt.lineno}"
        return _with_origin(value, where) if value.known else dataclasses.replace(value, origin=where)

    # attributes and items -------------------------------------------------------

    def _attribute(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.Attribute)
        owner = self.instance_of(expr.value, scope, line)
        if owner is not None:
            found = self._field(owner, expr.attr, scope, line)
            if found is not None:
                return found
        option = self.options.get(expr.attr)
        if option is not None:
            return self.option_default(option)
        for info in self.facts.classes.values():
            values = info.attributes.get(expr.attr)
            if values:
                value = self.resolve(values[-1], info.scope)
                return _with_origin(value, f"{info.node.name}.{expr.attr} at line {values[-1].lineno}")
        assignments = self.facts.attr_assigns.get(expr.attr, [])
        resolved = [self._from_assignment(item) for item in assignments]
        known = [value for value in resolved if value.known]
        if known and len({repr(value.value) for value in known}) == 1 and len(known) == len(resolved):
            return known[-1]
        return Value(known=False, origin=_describe(expr))

    def _field(
        self, owner: tuple[ClassInfo, ast.Call | None], attr: str, scope: Scope, line: int
    ) -> Value | None:
        """A field of a same-file config instance: the constructor's keyword, else its default."""
        info, call = owner
        given = keyword(call, attr) if call is not None else None
        if given is not None:
            value = self.resolve(given, scope, line)
            return _with_origin(value, f"{attr}= given to {info.node.name}(...) at line {given.lineno}")
        defaults = info.attributes.get(attr)
        if defaults:
            value = self.resolve(defaults[-1], info.scope)
            return _with_origin(
                value, f"the default of {info.node.name}.{attr} at line {defaults[-1].lineno}"
            )
        return None

    def _configured(self, assignment: Assignment) -> Value | None:
        """A module-level global the job's ``--name=value`` overrides through nanoGPT's configurator."""
        if (
            self.configurator is None
            or assignment.scope is not self.facts.module
            or assignment.stmt.lineno >= self.configurator
        ):
            return None
        self.consulted.add("global " + assignment.target)
        if self.job is None:
            return None
        given = self.job.configurator_value(assignment.target)
        if given is None:
            return None
        return Value(
            known=True,
            value=literal(given),
            origin=f"{given} from the job's args (--{assignment.target}={given})",
        )

    def _from_job(self, option: ArgOption) -> Value | None:
        """The option's value when the job's arguments set it (``--x V``, ``--x=V``, a switch)."""
        if self.job is None:
            return None
        if option.action in ("store_true", "store_false"):
            switch = self.job.flag_given(option.flags)
            if switch is None:
                return None
            return Value(
                known=True,
                value=option.action == "store_true",
                origin=f"{switch} in the job's args",
            )
        given = self.job.option_value(option.flags)
        if given is None:
            return None
        flag, text = given
        return Value(
            known=True,
            value=literal(text),
            origin=f"{text} from the job's args ({flag} {text})",
        )

    def option_default(self, option: ArgOption) -> Value:
        self.consulted.add("option " + option.dest)
        from_job = self._from_job(option)
        if from_job is not None:
            return from_job
        flag = next((f for f in option.flags if f.startswith("--")), option.flags[0])
        origin = f"the default of {flag} at line {option.call.lineno}"
        override = self.option_overrides.get(option.dest)
        default = override if override is not None else option.default
        if default is None:
            implied = {"store_true": False, "store_false": True}.get(option.action or "")
            return Value(known=True, value=implied, origin=origin, node=None)
        value = self.resolve(default, self.facts.module)
        return dataclasses.replace(value, origin=origin)

    def _subscript(self, expr: ast.expr, scope: Scope, line: int) -> Value:
        assert isinstance(expr, ast.Subscript)
        key = string_value(expr.slice)
        if key is None:
            return UNKNOWN
        found = self.item(expr.value, key, scope, line)
        if found.known or found.origin or not isinstance(expr.value, ast.Name):
            return found
        source = self._assignment_in_chain(scope, expr.value.id, line)
        if source is None:
            return Value(known=False, origin=f"{expr.value.id} is not assigned in this file")
        return Value(
            known=False,
            origin=f"{expr.value.id} comes from `{_describe(source.value)}` "
            f"at line {source.stmt.lineno}, read at run time",
        )

    def _assignment_in_chain(self, scope: Scope, name: str, line: int) -> Assignment | None:
        current: Scope | None = scope
        while current is not None:
            assignment = self.assignment_before(current, name, line if current is scope else 0)
            if assignment is not None:
                return assignment
            current = current.parent
        return None

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
            return dataclasses.replace(inner, value=number, known=number is not None)
        if name == "cpu_count":
            called = self._cpu_count_name(expr)
            return Value(known=False, origin=called, positive=True, counted_by=called)
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
        if name in ("field", "ib", "attrib"):
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
        positive = positive or (
            call_name(expr) == "min"
            and all((v.positive or (n or 0) > 0) for v, n in zip(values, numbers, strict=True))
        )
        counted_by = next((value.counted_by for value in values if value.counted_by), "")
        return Value(known=False, origin=f"{call_name(expr)}(...)", positive=positive, counted_by=counted_by)

    def _cpu_count_name(self, call: ast.Call) -> str:
        """``os.cpu_count()``, ``multiprocessing.cpu_count()``: what the trainer calls, by its module."""
        func = call.func
        if isinstance(func, ast.Attribute):
            owner = dotted(func.value)
            module = self.facts.imported_names.get(owner, owner)
            return f"{module}.cpu_count()"
        if isinstance(func, ast.Name):
            imported = self.facts.imported_names.get(func.id)
            return f"{imported}()" if imported else f"{func.id}()"
        return "os.cpu_count()"

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


def _annotation(function: Scope, name: str) -> str:
    """The class name a parameter is annotated with (``args: TrainArgs``), or ""."""
    node = function.node
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return ""
    for arg in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs):
        if arg.arg == name and arg.annotation is not None:
            return (
                last_identifier(arg.annotation)
                if isinstance(arg.annotation, (ast.Name, ast.Attribute))
                else ""
            )
    return ""


def _with_origin(value: Value, origin: str) -> Value:
    return dataclasses.replace(value, origin=value.origin or origin)


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
