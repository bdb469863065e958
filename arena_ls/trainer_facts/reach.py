"""Which same-file functions a call runs, and the call paths from a loop to a call.

A *path* is the chain of call sites from a root (the training loop, or a
framework hook) to a target call: the first site is in the root's scope, each
next one is inside the function the previous one calls. Functions are
followed up to ``MAX_HOPS`` calls deep; calls are resolved by name within the
file (nested and module functions, ``self.method()``, ``obj.method()`` where
``obj = SameFileClass(...)``), and a function passed as an argument
(``retry(train_step, batch)``, ``partial(step, ...)``) counts as called.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterable, Iterator

from arena_ls.trainer_facts.facts import CallSite, Chain, LoopSite, ModuleFacts, Scope

MAX_HOPS = 4
_MAX_PATHS = 64

Predicate = Callable[[CallSite], bool]
Root = LoopSite | Scope


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Path:
    """Call sites from a root to a target.

    ``first_chain`` is the first site's chain of statements below the root.
    """

    sites: tuple[CallSite, ...]
    first_chain: Chain

    @property
    def target(self) -> CallSite:
        return self.sites[-1]

    @property
    def first(self) -> CallSite:
        return self.sites[0]

    def chains(self) -> Iterator[Chain]:
        """The statements above each site, outermost first, below the root."""
        yield self.first_chain
        for site in self.sites[1:]:
            yield site.chain

    def links(self) -> Iterator[tuple[ast.AST, str]]:
        for chain in self.chains():
            yield from chain


def chain_below(chain: Chain, root: Root) -> Chain:
    """The part of a chain inside a loop's body (the whole chain for a function root)."""
    if isinstance(root, Scope):
        return chain
    for index, (node, _field) in enumerate(chain):
        if node is root.node:
            return chain[index + 1 :]
    return chain


def root_sites(root: Root) -> list[CallSite]:
    return root.calls


class CallGraph:
    """Resolves calls to same-file functions and walks paths between them."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.instances = _instance_classes(facts)
        self._callees: dict[int, list[Scope]] = {}
        self._memo: dict[tuple[str, int, int], list[tuple[CallSite, ...]]] = {}

    # resolution ----------------------------------------------------------------

    def callees(self, site: CallSite) -> list[Scope]:
        """Same-file functions this call runs: the callee and functions passed to it."""
        cached = self._callees.get(id(site))
        if cached is not None:
            return cached
        found: list[Scope] = []
        direct = self.function_for(site.node.func, site.scope)
        if direct is not None:
            found.append(direct)
        for arg in [*site.node.args, *(item.value for item in site.node.keywords)]:
            if isinstance(arg, (ast.Name, ast.Attribute)):
                passed = self.function_for(arg, site.scope)
                if passed is not None and passed not in found:
                    found.append(passed)
        self._callees[id(site)] = found
        return found

    def function_for(self, expr: ast.expr, scope: Scope) -> Scope | None:
        """The same-file function an expression names, if any."""
        if isinstance(expr, ast.Name):
            return self._lookup_name(expr.id, scope)
        if not isinstance(expr, ast.Attribute):
            return None
        owner = expr.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls") and scope.class_name:
            return self.method(scope.class_name, expr.attr)
        if isinstance(owner, ast.Name) and owner.id in self.facts.classes:
            return self.method(owner.id, expr.attr)
        if isinstance(owner, (ast.Name, ast.Attribute)):
            name = owner.id if isinstance(owner, ast.Name) else owner.attr
            class_name = self.instances.get(name)
            if class_name is not None:
                return self.method(class_name, expr.attr)
        return None

    def _lookup_name(self, name: str, scope: Scope) -> Scope | None:
        current: Scope | None = scope
        while current is not None:
            if current.kind != "class" and name in current.functions:
                return current.functions[name]
            current = current.parent
        return None

    def method(self, class_name: str, name: str, depth: int = 0) -> Scope | None:
        info = self.facts.classes.get(class_name)
        if info is None or depth > 8:
            return None
        if name in info.methods:
            return info.methods[name]
        for base in info.bases:
            found = self.method(base, name, depth + 1)
            if found is not None:
                return found
        return None

    # paths ---------------------------------------------------------------------

    def paths(self, root: Root, key: str, predicate: Predicate) -> list[Path]:
        """Every path (up to a bound) from a root to a call matching ``predicate``.

        ``key`` names the predicate for the memo: one key, one predicate.
        """
        found: list[Path] = []
        for site in root_sites(root):
            first_chain = chain_below(site.chain, root)
            for tail in self._from_site(site, key, predicate, MAX_HOPS, frozenset()):
                found.append(Path(sites=tail, first_chain=first_chain))
        return found

    def reaches(self, root: Root, key: str, predicate: Predicate) -> bool:
        return bool(self.paths(root, key, predicate))

    def sites_reach(self, sites: Iterable[CallSite], key: str, predicate: Predicate) -> bool:
        """Whether any of these call sites matches, or runs a function that does."""
        return any(self._from_site(site, key, predicate, MAX_HOPS, frozenset()) for site in sites)

    def _from_site(
        self, site: CallSite, key: str, predicate: Predicate, hops: int, stack: frozenset[int]
    ) -> list[tuple[CallSite, ...]]:
        result: list[tuple[CallSite, ...]] = []
        if predicate(site):
            result.append((site,))
        if hops <= 0:
            return result
        for callee in self.callees(site):
            if id(callee) in stack:
                continue
            for tail in self._in_scope(callee, key, predicate, hops - 1, stack | {id(callee)}):
                result.append((site, *tail))
                if len(result) >= _MAX_PATHS:
                    return result
        return result

    def _in_scope(
        self, scope: Scope, key: str, predicate: Predicate, hops: int, stack: frozenset[int]
    ) -> list[tuple[CallSite, ...]]:
        memo_key = (key, id(scope), hops)
        cached = self._memo.get(memo_key)
        if cached is not None:
            return cached
        self._memo[memo_key] = []  # a recursive call sees no paths instead of looping
        result: list[tuple[CallSite, ...]] = []
        for site in scope.calls:
            result.extend(self._from_site(site, key, predicate, hops, stack))
            if len(result) >= _MAX_PATHS:
                break
        self._memo[memo_key] = result
        return result

    def reached_scopes(self, sites: Iterable[CallSite], hops: int = MAX_HOPS) -> set[Scope]:
        """Functions run (directly or not) by these call sites."""
        seen: dict[int, Scope] = {}
        frontier = list(sites)
        for _ in range(hops):
            following: list[CallSite] = []
            for site in frontier:
                for callee in self.callees(site):
                    if id(callee) not in seen:
                        seen[id(callee)] = callee
                        following.extend(callee.calls)
            frontier = following
            if not frontier:
                break
        return set(seen.values())

    def nested_loops(self, loop: LoopSite) -> list[LoopSite]:
        """Loops inside a loop's body, directly or in the functions it runs."""
        inner = [
            other
            for other in loop.scope.loops
            if other is not loop and any(node is loop.node and field == "body" for node, field in other.chain)
        ]
        for scope in self.reached_scopes(loop.calls):
            inner.extend(scope.loops)
        return inner


def _instance_classes(facts: ModuleFacts) -> dict[str, str]:
    """``trainer = Trainer(...)`` (and ``self.trainer = ...``) for same-file classes."""
    found: dict[str, str] = {}
    groups = [scope.assigns for scope in facts.scopes] + [facts.attr_assigns]
    for group in groups:
        for name, assignments in group.items():
            for assignment in assignments:
                value = assignment.value
                if (
                    isinstance(value, ast.Call)
                    and isinstance(value.func, ast.Name)
                    and (value.func.id in facts.classes)
                ):
                    found[name] = value.func.id
    return found
