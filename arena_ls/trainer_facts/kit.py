"""The trainer kit (``arena_trainer``, contract 8.1) and its framework callbacks, as the gates see them.

A call of the kit keeps the rule it implements: ``oom_retry`` AR001,
``empty_cache`` AR002 and AR003 (its ``every``, default 50, is the cadence),
``save`` AR004-AR006 and AR014 (it announces what it saved; its ``every=N``
is its cadence, and ``if due(step, every=N):`` a guard of N steps), ``checkpoint``
AR014, ``resume_step`` AR007 and AR008 (so does ``resume_path`` in a plain
loop; a framework's ``fit`` must be handed it), ``should_stop`` AR009. A call is the
kit's when the name it calls comes from ``arena_trainer``: ``import
arena_trainer [as at]`` then ``at.save(...)``, or ``from arena_trainer import
save [as kit_save]`` then ``kit_save(...)``.

The kit's callbacks (``HFCallback``, ``LightningCallback``) count when the
file passes one to a framework: constructed (``callbacks=[HFCallback()]``) or
handed to ``trainer.add_callback(...)`` as a class or an instance.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from arena_ls.trainer_facts.facts import CallSite, ModuleFacts
from arena_ls.trainer_facts.names import dotted

KIT_MODULE = "arena_trainer"
CALLBACKS = frozenset({"HFCallback", "LightningCallback"})
EMPTY_CACHE_EVERY = 50
"""The kit's default cadence: ``empty_cache(step, every=50)``."""


class Kit:
    """Which calls of one trainer are the kit's."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.imported = KIT_MODULE in facts.imports
        self._modules = {KIT_MODULE} | {
            local for local, qualified in facts.imported_names.items() if qualified == KIT_MODULE
        }
        self._functions = {
            local: qualified.removeprefix(KIT_MODULE + ".")
            for local, qualified in facts.imported_names.items()
            if qualified.startswith(KIT_MODULE + ".")
        }

    def name_of(self, expr: ast.expr) -> str | None:
        """The kit's name an expression refers to (``at.save`` or an imported ``save``), else None."""
        if not self.imported:
            return None
        if isinstance(expr, ast.Attribute) and dotted(expr.value) in self._modules:
            return expr.attr
        if isinstance(expr, ast.Name):
            return self._functions.get(expr.id)
        return None

    def function(self, site: CallSite) -> str | None:
        """The kit function a call site calls, or None when it is not the kit's."""
        return self.name_of(site.node.func)

    def calls(self, *names: str) -> Callable[[CallSite], bool]:
        """A predicate for call sites calling one of the kit's ``names``."""
        wanted = frozenset(names)

        def predicate(site: CallSite) -> bool:
            return self.function(site) in wanted

        return predicate

    def sites(self, *names: str) -> list[CallSite]:
        predicate = self.calls(*names)
        return [site for site in self.facts.calls if predicate(site)]

    def callback(self) -> CallSite | None:
        """Where the file hands the kit's callback to a framework, or None."""
        if not self.imported:
            return None
        for site in self.facts.calls:
            if self.function(site) in CALLBACKS:
                return site
            if site.name == "add_callback" and any(self._refers_to_callback(arg) for arg in site.node.args):
                return site
        return None

    def _refers_to_callback(self, expr: ast.expr) -> bool:
        target = expr.func if isinstance(expr, ast.Call) else expr
        return self.name_of(target) in CALLBACKS
