"""One walk over a trainer's AST that records what the rules ask about.

The walk visits every statement once, keeping the chain of compound
statements above it (``chain``), and scans each statement's own expressions
with an iterative stack (deeply nested expressions never recurse). It records
call sites, loops, ``try`` statements, assignments, classes and functions;
everything else is answered later from these records or from small subtrees.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Literal, cast

from arena_ls.trainer_facts.names import call_name

ChainLink = tuple[ast.AST, str]
"""A compound statement (or an ``except`` handler / ``case``) and the field we are in."""
Chain = tuple[ChainLink, ...]

ScopeNode = ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
LoopNode = ast.For | ast.AsyncFor | ast.While
ScopeKind = Literal["module", "function", "class"]

LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
_DTYPE_ATTRS = frozenset({"bfloat16", "float16", "half"})
_SKIP = frozenset({ast.Name, ast.Constant, ast.Load, ast.Store, ast.Del})


@dataclasses.dataclass(eq=False, slots=True)
class CallSite:
    """A call expression, the scope it runs in, and the statements around it."""

    node: ast.Call
    name: str
    scope: Scope
    chain: Chain


@dataclasses.dataclass(eq=False, slots=True)
class LoopSite:
    node: LoopNode
    scope: Scope
    chain: Chain
    calls: list[CallSite] = dataclasses.field(default_factory=list)
    """Call sites run on every iteration (body, and a ``while`` test), in this scope only."""


@dataclasses.dataclass(eq=False, slots=True)
class TrySite:
    node: ast.Try
    scope: Scope
    chain: Chain


@dataclasses.dataclass(eq=False, slots=True)
class ExprSite:
    """An expression of interest (a dtype attribute) and where it is."""

    node: ast.expr
    scope: Scope
    chain: Chain


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Assignment:
    """``target = value``, as written in one statement."""

    target: str
    value: ast.expr
    stmt: ast.stmt
    scope: Scope


@dataclasses.dataclass(eq=False, slots=True)
class Scope:
    """The module, a function, or a class body."""

    node: ScopeNode
    kind: ScopeKind
    name: str
    parent: Scope | None
    class_name: str | None = None
    calls: list[CallSite] = dataclasses.field(default_factory=list)
    loops: list[LoopSite] = dataclasses.field(default_factory=list)
    assigns: dict[str, list[Assignment]] = dataclasses.field(default_factory=dict)
    item_assigns: dict[str, list[Assignment]] = dataclasses.field(default_factory=dict)
    """``name["key"] = value``, keyed by ``name``; ``Assignment.target`` is the key."""
    functions: dict[str, Scope] = dataclasses.field(default_factory=dict)
    returns: list[ast.Return] = dataclasses.field(default_factory=list)

    def params(self) -> dict[str, ast.expr | None]:
        """Parameter names and their defaults (None when there is no default)."""
        node = self.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return {}
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
        defaults.extend(args.defaults)
        result = {arg.arg: default for arg, default in zip(positional, defaults, strict=False)}
        for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
            result[arg.arg] = kw_default
        return result

    def positional_params(self) -> list[str]:
        node = self.node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return []
        return [arg.arg for arg in (*node.args.posonlyargs, *node.args.args)]


@dataclasses.dataclass(eq=False, slots=True)
class ClassInfo:
    node: ast.ClassDef
    scope: Scope
    bases: list[str]
    methods: dict[str, Scope] = dataclasses.field(default_factory=dict)
    attributes: dict[str, list[ast.expr]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(eq=False, slots=True)
class ModuleFacts:
    """What the walk found in one module."""

    tree: ast.Module
    module: Scope
    scopes: list[Scope] = dataclasses.field(default_factory=list)
    calls: list[CallSite] = dataclasses.field(default_factory=list)
    loops: list[LoopSite] = dataclasses.field(default_factory=list)
    tries: list[TrySite] = dataclasses.field(default_factory=list)
    classes: dict[str, ClassInfo] = dataclasses.field(default_factory=dict)
    attr_assigns: dict[str, list[Assignment]] = dataclasses.field(default_factory=dict)
    """``anything.attr = value`` keyed by ``attr``."""
    dtype_refs: list[ExprSite] = dataclasses.field(default_factory=list)
    imports: set[str] = dataclasses.field(default_factory=set)
    """Top-level packages imported anywhere (``torch``, ``lightning``...)."""
    imported_names: dict[str, str] = dataclasses.field(default_factory=dict)
    """Local name to qualified name for ``from x import y [as z]``."""
    loop_index: dict[int, LoopSite] = dataclasses.field(default_factory=dict)
    site_index: dict[int, CallSite] = dataclasses.field(default_factory=dict)
    assignment_index: dict[str, list[Assignment]] = dataclasses.field(default_factory=dict)
    docstring_lines: set[int] | None = None
    """1-based lines of docstrings (computed on first use by ``context``)."""

    def loop_site(self, node: ast.AST) -> LoopSite | None:
        return self.loop_index.get(id(node))

    def site_for(self, call: ast.Call) -> CallSite | None:
        """The call site of a call node (an index built on first use)."""
        index = self.site_index
        if not index:
            index.update((id(site.node), site) for site in self.calls)
        return index.get(id(call))

    def calls_named(self, *names: str) -> list[CallSite]:
        wanted = set(names)
        return [site for site in self.calls if site.name in wanted]

    def all_assignments(self, name: str) -> list[Assignment]:
        """Assignments to a plain name in any scope (an index built on first use)."""
        index = self.assignment_index
        if not index:
            for scope in self.scopes:
                for target, assignments in scope.assigns.items():
                    index.setdefault(target, []).extend(assignments)
            index.setdefault("", [])
        return index.get(name, [])


def collect_facts(tree: ast.Module) -> ModuleFacts:
    module = Scope(node=tree, kind="module", name="<module>", parent=None)
    facts = ModuleFacts(tree=tree, module=module)
    facts.scopes.append(module)
    _Walker(facts).statements(tree.body, module, ())
    _index_loop_calls(facts)
    return facts


def _index_loop_calls(facts: ModuleFacts) -> None:
    """Give every loop the call sites that run on each of its iterations."""
    loops = facts.loop_index = {id(loop.node): loop for loop in facts.loops}
    for site in facts.calls:
        for node, field in site.chain:
            if isinstance(node, LOOP_TYPES) and (
                field == "body" or (field == "test" and isinstance(node, ast.While))
            ):
                loops[id(node)].calls.append(site)


class _Walker:
    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts

    # statements ---------------------------------------------------------------

    def statements(self, body: Sequence[ast.stmt], scope: Scope, chain: Chain) -> None:
        for stmt in body:
            self.statement(stmt, scope, chain)

    def statement(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        handler = _COMPOUND.get(type(stmt))
        if handler is not None:
            handler(self, stmt, scope, chain)
            return
        self._simple(stmt, scope, chain)
        self.expressions(stmt, scope, chain)

    def _simple(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._record_target(target, stmt.value, stmt, scope)
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._record_target(stmt.target, stmt.value, stmt, scope)
            self._class_attribute(stmt.target, stmt.value, scope)
        elif isinstance(stmt, ast.Return):
            scope.returns.append(stmt)
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            self._imports(stmt)
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._class_attribute(target, stmt.value, scope)

    def _record_target(self, target: ast.expr, value: ast.expr, stmt: ast.stmt, scope: Scope) -> None:
        if isinstance(target, ast.Name):
            scope.assigns.setdefault(target.id, []).append(Assignment(target.id, value, stmt, scope))
        elif isinstance(target, ast.Attribute):
            self.facts.attr_assigns.setdefault(target.attr, []).append(
                Assignment(target.attr, value, stmt, scope)
            )
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            key = target.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                scope.item_assigns.setdefault(target.value.id, []).append(
                    Assignment(key.value, value, stmt, scope)
                )
        elif (
            isinstance(target, (ast.Tuple, ast.List))
            and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
        ):
            for sub_target, sub_value in zip(target.elts, value.elts, strict=True):
                self._record_target(sub_target, sub_value, stmt, scope)

    def _class_attribute(self, target: ast.expr, value: ast.expr, scope: Scope) -> None:
        if scope.kind == "class" and isinstance(target, ast.Name):
            info = self.facts.classes.get(scope.name)
            if info is not None and info.scope is scope:
                info.attributes.setdefault(target.id, []).append(value)

    def _imports(self, stmt: ast.Import | ast.ImportFrom) -> None:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                self.facts.imports.add(alias.name.split(".")[0])
                if alias.asname:
                    self.facts.imported_names[alias.asname] = alias.name
            return
        if stmt.module and not stmt.level:
            self.facts.imports.add(stmt.module.split(".")[0])
            for alias in stmt.names:
                self.facts.imported_names[alias.asname or alias.name] = f"{stmt.module}.{alias.name}"

    # compound statements -------------------------------------------------------

    def _function(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        assert isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
        for decorator in stmt.decorator_list:
            self.expressions(decorator, scope, chain)
        self.expressions(stmt.args, scope, chain)
        class_name = scope.name if scope.kind == "class" else scope.class_name
        inner = Scope(node=stmt, kind="function", name=stmt.name, parent=scope, class_name=class_name)
        self.facts.scopes.append(inner)
        scope.functions[stmt.name] = inner
        if scope.kind == "class":
            info = self.facts.classes.get(scope.name)
            if info is not None and info.scope is scope:
                info.methods[stmt.name] = inner
        self.statements(stmt.body, inner, ())

    def _class(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        assert isinstance(stmt, ast.ClassDef)
        for expr in (*stmt.decorator_list, *stmt.bases, *stmt.keywords):
            self.expressions(expr, scope, chain)
        inner = Scope(node=stmt, kind="class", name=stmt.name, parent=scope, class_name=stmt.name)
        self.facts.scopes.append(inner)
        bases = [_base_name(base) for base in stmt.bases]
        self.facts.classes[stmt.name] = ClassInfo(node=stmt, scope=inner, bases=bases)
        self.statements(stmt.body, inner, ())

    def _loop(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        assert isinstance(stmt, LOOP_TYPES)
        site = LoopSite(node=stmt, scope=scope, chain=chain)
        self.facts.loops.append(site)
        scope.loops.append(site)
        if isinstance(stmt, ast.While):
            self.expressions(stmt.test, scope, (*chain, (stmt, "test")))
        else:
            self.expressions(stmt.target, scope, (*chain, (stmt, "iter")))
            self.expressions(stmt.iter, scope, (*chain, (stmt, "iter")))
        self.statements(stmt.body, scope, (*chain, (stmt, "body")))
        self.statements(stmt.orelse, scope, (*chain, (stmt, "orelse")))

    def _if(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        assert isinstance(stmt, ast.If)
        self.expressions(stmt.test, scope, (*chain, (stmt, "test")))
        self.statements(stmt.body, scope, (*chain, (stmt, "body")))
        self.statements(stmt.orelse, scope, (*chain, (stmt, "orelse")))

    def _with(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        assert isinstance(stmt, (ast.With, ast.AsyncWith))
        for item in stmt.items:
            self.expressions(item, scope, (*chain, (stmt, "items")))
        self.statements(stmt.body, scope, (*chain, (stmt, "body")))

    def _try(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        try_node = cast("ast.Try", stmt)  # ``try`` and ``try/except*`` share these fields
        self.facts.tries.append(TrySite(node=try_node, scope=scope, chain=chain))
        self.statements(try_node.body, scope, (*chain, (stmt, "body")))
        for handler in try_node.handlers:
            inner = (*chain, (stmt, "handlers"))
            if handler.type is not None:
                self.expressions(handler.type, scope, (*inner, (handler, "type")))
            self.statements(handler.body, scope, (*inner, (handler, "body")))
        self.statements(try_node.orelse, scope, (*chain, (stmt, "orelse")))
        self.statements(try_node.finalbody, scope, (*chain, (stmt, "finalbody")))

    def _match(self, stmt: ast.stmt, scope: Scope, chain: Chain) -> None:
        assert isinstance(stmt, ast.Match)
        self.expressions(stmt.subject, scope, (*chain, (stmt, "subject")))
        for case in stmt.cases:
            inner = (*chain, (stmt, "cases"))
            if case.guard is not None:
                self.expressions(case.guard, scope, (*inner, (case, "guard")))
            self.statements(case.body, scope, (*inner, (case, "body")))

    # expressions ---------------------------------------------------------------

    def expressions(self, root: ast.AST, scope: Scope, chain: Chain) -> None:
        """Record the calls and dtype attributes in one statement's own expressions."""
        facts_calls = self.facts.calls
        scope_calls = scope.calls
        dtype_refs = self.facts.dtype_refs
        fields_of = _FIELD_CACHE
        skip = _SKIP
        stack: list[ast.AST] = [root]
        pop = stack.pop
        push = stack.append
        while stack:
            node = pop()
            kind = type(node)
            if kind in skip:
                continue
            if kind is ast.Call:
                site = CallSite(node, call_name(node), scope, chain)  # type: ignore[arg-type]
                facts_calls.append(site)
                scope_calls.append(site)
            elif kind is ast.Attribute and node.attr in _DTYPE_ATTRS:  # type: ignore[attr-defined]
                dtype_refs.append(ExprSite(node, scope, chain))  # type: ignore[arg-type]
            fields = fields_of.get(kind)
            if fields is None:
                fields = _child_fields(kind)
            for field in fields:
                value = getattr(node, field)
                if type(value) is list:
                    for item in value:
                        if item is not None:
                            push(item)
                elif value is not None and not isinstance(value, (str, int, float, bytes)):
                    push(value)


_FIELD_CACHE: dict[type, tuple[str, ...]] = {}


def _child_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node class that can hold child nodes (never nested statements)."""
    skip = {
        "ctx",
        "op",
        "ops",
        "type_comment",
        "kind",
        "id",
        "attr",
        "conversion",
        "is_async",
        "level",
        "simple",
        "asname",
    }
    if issubclass(kind, ast.stmt):
        skip |= {"body", "orelse", "finalbody", "handlers", "cases"}
    fields = tuple(name for name in getattr(kind, "_fields", ()) if name not in skip)
    _FIELD_CACHE[kind] = fields
    return fields


def _base_name(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return ""


_COMPOUND = {
    ast.FunctionDef: _Walker._function,
    ast.AsyncFunctionDef: _Walker._function,
    ast.ClassDef: _Walker._class,
    ast.For: _Walker._loop,
    ast.AsyncFor: _Walker._loop,
    ast.While: _Walker._loop,
    ast.If: _Walker._if,
    ast.With: _Walker._with,
    ast.AsyncWith: _Walker._with,
    ast.Try: _Walker._try,
    ast.Match: _Walker._match,
}
if hasattr(ast, "TryStar"):
    _COMPOUND[ast.TryStar] = _Walker._try


def iter_statements(body: Iterable[ast.stmt]) -> Iterable[ast.stmt]:
    """Every statement in a block and in its nested blocks, not entering functions or classes."""
    stack = list(reversed(list(body)))
    while stack:
        stmt = stack.pop()
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        nested: list[ast.stmt] = []
        for field in ("body", "orelse", "finalbody"):
            nested.extend(getattr(stmt, field, ()) or ())
        for handler in getattr(stmt, "handlers", ()) or ():
            nested.extend(handler.body)
        for case in getattr(stmt, "cases", ()) or ():
            nested.extend(case.body)
        stack.extend(reversed(nested))
