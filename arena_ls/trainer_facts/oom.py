"""OOM-retry wrappers: a ``try`` around the step that catches a CUDA OOM and runs it again.

A handler counts when it catches ``torch.cuda.OutOfMemoryError`` /
``torch.OutOfMemoryError`` (or a tuple holding one), or catches
``RuntimeError`` / ``Exception`` and checks the message for "out of memory"
(or ``isinstance(e, ...OutOfMemoryError)``). It retries when the handler runs
the step again (calls what the ``try`` called, or the function it is in), or
when the ``try`` sits in a retry loop that a successful step leaves with
``break``/``return`` (or a loop over attempts). A wrapper of that shape
around a function parameter (a decorator or a ``run_with_retry(fn, ...)``
helper) counts when it is applied to a function that reaches backward.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator

from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import LOOP_TYPES, CallSite, Scope, TrySite
from arena_ls.trainer_facts.names import call_name, dotted, string_value
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.sites import is_backward, is_oom_type

_BROAD = frozenset({"RuntimeError", "Exception", "BaseException"})
_ATTEMPT = lazy(r"attempt|retr|tries|trial", re.IGNORECASE)
_MESSAGE_CHECKS = frozenset(
    {"find", "search", "match", "startswith", "endswith", "index", "count", "fullmatch", "__contains__"}
)


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class OomHandler:
    try_site: TrySite
    handler: ast.ExceptHandler


@dataclasses.dataclass(frozen=True, slots=True)
class OomVerdict:
    """Whether the trainer retries the step on OOM, and the nearest miss if not."""

    ok: bool
    near_miss: str = ""


class OomAnalyzer:
    def __init__(self, ctx: TrainerContext) -> None:
        self.ctx = ctx
        self.graph = ctx.graph
        self.facts = ctx.facts

    def verdict(self) -> OomVerdict:
        handlers = list(self.oom_handlers())
        misses: list[str] = []
        for found in handlers:
            around_step = self._around_step(found.try_site)
            retries = self._retries(found)
            if around_step and retries:
                return OomVerdict(ok=True)
            line = found.handler.lineno
            if around_step:
                misses.append(f"the OOM handler at line {line} does not retry the step")
            elif not self._calls_parameter(found.try_site):
                misses.append(f"the OOM handler at line {line} is not around the training step")
        if self._wrapper_applied(handlers):
            return OomVerdict(ok=True)
        return OomVerdict(ok=False, near_miss=misses[0] if misses else "")

    # handlers ------------------------------------------------------------------

    def oom_handlers(self) -> Iterator[OomHandler]:
        for try_site in self.facts.tries:
            for handler in try_site.node.handlers:
                if _catches_oom(handler):
                    yield OomHandler(try_site=try_site, handler=handler)

    def _sites_in(self, try_site: TrySite, node: ast.AST, field: str) -> list[CallSite]:
        return [
            site
            for site in try_site.scope.calls
            if any(link_node is node and link_field == field for link_node, link_field in site.chain)
        ]

    def _around_step(self, try_site: TrySite) -> bool:
        body = self._sites_in(try_site, try_site.node, "body")
        framework = self.ctx.training.framework
        if framework is not None and any(site is framework.call for site in body):
            return True
        return self.graph.sites_reach(body, "backward", is_backward)

    def _retries(self, found: OomHandler) -> bool:
        try_site = found.try_site
        body = self._sites_in(try_site, try_site.node, "body")
        again = self._sites_in(try_site, found.handler, "body")
        if self.graph.sites_reach(again, "backward", is_backward):
            return True
        framework = self.ctx.training.framework
        params = _enclosing_params(try_site.scope)
        step_calls = [
            site
            for site in body
            if (framework is not None and site is framework.call)
            or (isinstance(site.node.func, ast.Name) and site.node.func.id in params)
            or self.graph.sites_reach([site], "backward", is_backward)
        ]
        called = {dotted(site.node.func) for site in step_calls}
        for site in again:
            if dotted(site.node.func) in called or try_site.scope in self.graph.callees(site):
                return True
        return self._in_retry_loop(try_site)

    def _in_retry_loop(self, try_site: TrySite) -> bool:
        loops = [node for node, field in try_site.chain if isinstance(node, LOOP_TYPES) and field == "body"]
        if not loops:
            return False
        loop = loops[-1]
        header = loop.target if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test
        if _ATTEMPT.search(ast.unparse(header)):
            return True
        node = try_site.node
        return any(isinstance(stmt, (ast.Break, ast.Return)) for stmt in (*node.body, *node.orelse))

    # wrappers --------------------------------------------------------------------

    def _calls_parameter(self, try_site: TrySite) -> bool:
        """The ``try`` calls a function it was given: ``fn(*args)`` in a decorator."""
        params = _enclosing_params(try_site.scope)
        return any(
            isinstance(site.node.func, ast.Name) and site.node.func.id in params
            for site in self._sites_in(try_site, try_site.node, "body")
        )

    def _wrapper_applied(self, handlers: list[OomHandler]) -> bool:
        wrappers = {
            id(_outermost_function(found.try_site.scope)): _outermost_function(found.try_site.scope)
            for found in handlers
            if self._calls_parameter(found.try_site) and self._retries(found)
        }
        if not wrappers:
            return False
        for scope in self.facts.scopes:
            node = scope.node
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and any(
                    self._is_wrapper(decorator, scope.parent or scope, wrappers)
                    for decorator in node.decorator_list
                )
                and self.graph.sites_reach(scope.calls, "backward", is_backward)
            ):
                return True
        for site in self.facts.calls:
            callee = self.graph.function_for(site.node.func, site.scope)
            if callee is not None and id(callee) in wrappers and self._passes_step(site):
                return True
        return False

    def _is_wrapper(self, decorator: ast.expr, scope: Scope, wrappers: dict[int, Scope]) -> bool:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        function = self.graph.function_for(target, scope)
        return function is not None and id(function) in wrappers

    def _passes_step(self, site: CallSite) -> bool:
        for arg in [*site.node.args, *(item.value for item in site.node.keywords)]:
            if isinstance(arg, ast.Lambda):
                inner = [
                    self.facts.site_for(node) for node in ast.walk(arg.body) if isinstance(node, ast.Call)
                ]
                if self.graph.sites_reach([s for s in inner if s is not None], "backward", is_backward):
                    return True
            elif isinstance(arg, (ast.Name, ast.Attribute)):
                function = self.graph.function_for(arg, site.scope)
                if function is not None and self.graph.sites_reach(function.calls, "backward", is_backward):
                    return True
        return False


def _catches_oom(handler: ast.ExceptHandler) -> bool:
    if is_oom_type(handler.type):
        return True
    names = _exception_names(handler.type)
    if handler.type is not None and not names & _BROAD:
        return False
    return any(_checks_oom(node) for stmt in handler.body for node in ast.walk(stmt))


def _exception_names(expr: ast.expr | None) -> set[str]:
    if expr is None:
        return set()
    items = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    return {dotted(item).split(".")[-1] for item in items}


def _checks_oom(node: ast.AST) -> bool:
    """``"out of memory" in str(e)``, ``msg.find("out of memory")``, ``isinstance(e, ...OOM)``."""
    if isinstance(node, ast.Compare):
        return any(_is_oom_text(item) for item in (node.left, *node.comparators))
    if isinstance(node, ast.Call):
        name = call_name(node)
        if name in _MESSAGE_CHECKS:
            return any(_is_oom_text(arg) for arg in node.args)
        if name == "isinstance" and len(node.args) == 2:
            return is_oom_type(node.args[1])
    return False


def _is_oom_text(expr: ast.expr) -> bool:
    text = string_value(expr)
    return text is not None and "out of memory" in text.lower()


def _enclosing_params(scope: Scope) -> set[str]:
    names: set[str] = set()
    current: Scope | None = scope
    while current is not None and current.kind == "function":
        names.update(current.params())
        node = current.node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for arg in (node.args.vararg, node.args.kwarg):
                if arg is not None:
                    names.add(arg.arg)
        current = current.parent
    return names


def _outermost_function(scope: Scope) -> Scope:
    current = scope
    while current.parent is not None and current.parent.kind == "function":
        current = current.parent
    return current
