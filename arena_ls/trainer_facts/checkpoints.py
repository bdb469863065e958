"""Checkpoint saves and what they carry.

A save is ``torch.save``, ``accelerator.save_state``, ``trainer.save_checkpoint``
or safetensors' ``save_file`` (a same-file function of one of those names is
followed into instead). What is saved is read from the saved object: a dict
literal, or a dict built in a variable before the save (the assignment in
effect at the save, plus ``d["key"] = ...`` and ``d.update(...)``), through a
parameter of a helper back to the argument its caller passed, and through a
same-file function that returns the dict.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from arena_ls.trainer_facts.facts import CallSite, ModuleFacts, Scope
from arena_ls.trainer_facts.kit import Kit
from arena_ls.trainer_facts.names import argument, dotted, is_true, keyword, last_identifier, receiver
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.reach import CallGraph, Path
from arena_ls.trainer_facts.sites import is_save_call

_STEP_KEY = lazy(
    r"step|^(iter_num|iteration|iterations|iter|iters|it|n_iter|num_updates|updates|update"
    r"|global_iter|tokens_seen|samples_seen)$",
    re.IGNORECASE,
)
_EPOCH_KEY = lazy(
    r"^(epoch|epochs|cur_epoch|current_epoch|epoch_num|epoch_idx|epochs_run|epochs_done|last_epoch"
    r"|epochs_completed|completed_epochs)$",
    re.IGNORECASE,
)
_BATCH_KEY = lazy(
    r"^(batch|batch_idx|batch_index|batch_num|batch_no|batch_i|batch_id"
    r"|batches_seen|batch_step)$",
    re.IGNORECASE,
)
_MODULE_NAME = lazy(r"model|net|module|encoder|decoder|transformer|gpt|llm", re.IGNORECASE)
_MAX_DEPTH = 6


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Contents:
    """What one saved object holds, as far as the file shows."""

    known: bool
    node: ast.AST
    optimizer: bool = False
    step: bool = False
    epoch: bool = False
    whole_module: bool = False
    names: tuple[str, ...] = ()
    """The keys the saved dict holds, as written (for the message: what is there)."""

    def merge(self, other: Contents) -> Contents:
        return Contents(
            known=self.known and other.known,
            node=self.node,
            optimizer=self.optimizer or other.optimizer,
            step=self.step or other.step,
            epoch=self.epoch or other.epoch,
            whole_module=self.whole_module and other.whole_module,
            names=_names(self.names, other.names),
        )


@dataclasses.dataclass(slots=True)
class _Keys:
    optimizer: bool = False
    step: bool = False
    epoch: bool = False
    batch: bool = False
    extras: bool = False
    """``**other`` or ``.update(other)`` with something unknown: keys may be missing from view."""
    names: list[str] = dataclasses.field(default_factory=list)

    def add_key(self, key: str, value: ast.expr | None) -> None:
        if len(self.names) < MAX_NAMES and key not in self.names:
            self.names.append(key)
        lowered = key.lower()
        if "optim" in lowered or (value is not None and _is_optimizer_state(value)):
            self.optimizer = True
        if _STEP_KEY.search(lowered):
            self.step = True
        if _EPOCH_KEY.match(lowered):
            self.epoch = True
        if _BATCH_KEY.match(lowered):
            self.batch = True
        if isinstance(value, ast.Dict):
            self.add_dict(value)

    def add_dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=False):
            if key is None:
                self.extras = True
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                self.add_key(key.value, value)

    def add_keywords(self, keywords: list[ast.keyword]) -> None:
        for item in keywords:
            if item.arg is None:
                self.extras = True
            else:
                self.add_key(item.arg, item.value)


class SaveAnalyzer:
    """Finds checkpoint saves and reads what they carry."""

    def __init__(self, facts: ModuleFacts, graph: CallGraph) -> None:
        self.facts = facts
        self.graph = graph
        self.registers_state = any(site.name == "register_for_checkpointing" for site in facts.calls)
        self.kit = Kit(facts)

    def is_save(self, site: CallSite) -> bool:
        if self.kit.function(site) == "save":
            return True  # arena_trainer.save(obj, path, step): atomic, and announced
        if not is_save_call(site):
            return False
        return site.name == "save" or self.graph.function_for(site.node.func, site.scope) is None

    def contents(self, path: Path) -> Contents:
        site = path.target
        if site.name in ("save_checkpoint", "save_state") and not isinstance(site.node.func, ast.Attribute):
            return Contents(known=False, node=site.node)  # a helper imported from elsewhere
        if site.name == "save_checkpoint":
            weights_only = is_true(keyword(site.node, "weights_only"))
            return Contents(known=True, node=site.node, optimizer=not weights_only, step=True)
        if site.name == "save_state":
            folder = argument(site.node, 0, "output_dir")
            step = self.registers_state or self._mentions_counter(folder, site.scope)
            return Contents(known=True, node=site.node, optimizer=True, step=step)
        saved = self._saved_object(site)
        if saved is None:
            return Contents(known=False, node=site.node)
        contents = self._object(saved, site.scope, path, len(path.sites) - 1, 0)
        if self.kit.function(site) == "save" and argument(site.node, 2, "step") is not None:
            contents = dataclasses.replace(
                contents, step=True
            )  # the kit announces it; resume_step() reads it
        if contents.whole_module or not isinstance(contents.node, ast.Dict | ast.Call):
            return dataclasses.replace(contents, node=site.node)  # report at the save itself
        return contents

    # saved objects ---------------------------------------------------------------

    @staticmethod
    def _saved_object(site: CallSite) -> ast.expr | None:
        """``torch.save(obj, f)``, ``save_file(tensors, f)``, ``fabric.save(path, state)``."""
        if site.name == "save_file":
            return argument(site.node, 0, "tensors")
        if isinstance(site.node.func, ast.Attribute) and last_identifier(site.node.func.value) == "fabric":
            return argument(site.node, 1, "state")
        return argument(site.node, 0, "obj")

    def _object(self, expr: ast.expr, scope: Scope, path: Path, index: int, depth: int) -> Contents:
        if depth > _MAX_DEPTH:
            return Contents(known=False, node=expr)
        if isinstance(expr, ast.Dict):
            keys = _Keys()
            keys.add_dict(expr)
            return _from_keys(keys, expr)
        if isinstance(expr, ast.Call):
            return self._call(expr, scope, path, index, depth)
        if isinstance(expr, ast.Name):
            return self._name(expr, scope, path, index, depth)
        if isinstance(expr, ast.Attribute) and _MODULE_NAME.search(expr.attr):
            return Contents(known=True, node=expr, whole_module=True)
        return Contents(known=False, node=expr)

    def _call(self, expr: ast.Call, scope: Scope, path: Path, index: int, depth: int) -> Contents:
        if isinstance(expr.func, ast.Name) and expr.func.id == "dict":
            keys = _Keys(extras=bool(expr.args))
            keys.add_keywords(expr.keywords)
            return _from_keys(keys, expr)
        if last_identifier(expr.func) == "state_dict":
            return Contents(known=True, node=expr, optimizer=_is_optimizer_state(expr))
        function = self.graph.function_for(expr.func, scope)
        if function is not None:
            returned = [stmt.value for stmt in function.returns if stmt.value is not None]
            if returned:
                return self._object(returned[-1], function, path, index, depth + 1)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("to", "cpu", "cuda"):
            inner = self._object(expr.func.value, scope, path, index, depth + 1)
            return dataclasses.replace(inner, node=expr)
        if _MODULE_NAME.search(last_identifier(expr.func)) or (
            isinstance(expr.func, ast.Name) and expr.func.id in self.facts.classes
        ):
            return Contents(known=True, node=expr, whole_module=True)
        return Contents(known=False, node=expr)

    def _name(self, expr: ast.Name, scope: Scope, path: Path, index: int, depth: int) -> Contents:
        name = expr.id
        if name in scope.params() and scope.kind == "function":
            argument_expr = self._argument_from_caller(scope, name, path, index)
            if argument_expr is not None:
                caller = path.sites[index - 1]
                return self._object(argument_expr, caller.scope, path, index - 1, depth + 1)
            return Contents(known=False, node=expr)
        line = path.sites[index].node.lineno
        current: Scope | None = scope
        while current is not None:
            assignments = current.assigns.get(name)
            if assignments:
                before = [item for item in assignments if item.stmt.lineno <= line]
                chosen = before[-1] if before else assignments[-1]
                contents = self._object(chosen.value, current, path, index, depth + 1)
                if not contents.known and _MODULE_NAME.search(name):
                    return Contents(known=True, node=expr, whole_module=True)
                return self._with_items(contents, current, name, chosen.stmt.lineno, line)
            current = current.parent
        if _MODULE_NAME.search(name):
            return Contents(known=True, node=expr, whole_module=True)
        return Contents(known=False, node=expr)

    def _argument_from_caller(self, scope: Scope, name: str, path: Path, index: int) -> ast.expr | None:
        if index <= 0:
            return None
        call = path.sites[index - 1].node
        found = keyword(call, name)
        if found is not None:
            return found
        positional = scope.positional_params()
        if positional and positional[0] in ("self", "cls") and isinstance(call.func, ast.Attribute):
            positional = positional[1:]
        if name in positional:
            return argument(call, positional.index(name), name)
        return None

    def _with_items(self, contents: Contents, scope: Scope, name: str, start: int, end: int) -> Contents:
        """Add ``name["key"] = ...`` and ``name.update(...)`` made between two lines."""
        keys = _Keys()
        touched = False
        for item in scope.item_assigns.get(name, []):
            if start <= item.stmt.lineno <= end:
                keys.add_key(item.target, item.value)
                touched = True
        for site in scope.calls:
            if (
                site.name == "update"
                and dotted(receiver(site.node)) == name
                and (start <= site.node.lineno <= end)
            ):
                keys.extras = keys.extras or bool(
                    site.node.args and not isinstance(site.node.args[0], ast.Dict)
                )
                for arg in site.node.args:
                    if isinstance(arg, ast.Dict):
                        keys.add_dict(arg)
                keys.add_keywords(site.node.keywords)
                touched = True
        if not touched:
            return contents
        added = _from_keys(keys, contents.node)
        return Contents(
            known=contents.known or added.known,
            node=contents.node,
            optimizer=contents.optimizer or added.optimizer,
            step=contents.step or added.step,
            epoch=contents.epoch or added.epoch,
            names=_names(contents.names, added.names),
        )

    def _mentions_counter(self, expr: ast.expr | None, scope: Scope) -> bool:
        """A folder name built from a value: ``f"step_{step}"``, ``"ckpt-{}".format(n)``."""
        if expr is None:
            return False
        names: list[str] = []
        for node in ast.walk(expr):
            if isinstance(node, ast.FormattedValue):
                return True
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and (node.func.attr == "format")
            ):
                return True
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Mod)
                and isinstance(node.left, ast.Constant)
            ):
                return True
            if isinstance(node, ast.Name):
                names.append(node.id)
        for name in names:
            for assignment in scope.assigns.get(name, []):
                if assignment.value is not expr and self._mentions_counter_shallow(assignment.value):
                    return True
        return False

    def _mentions_counter_shallow(self, expr: ast.expr) -> bool:
        return any(isinstance(node, ast.FormattedValue) for node in ast.walk(expr))


def _from_keys(keys: _Keys, node: ast.AST) -> Contents:
    step = keys.step or (keys.epoch and keys.batch)
    complete = keys.optimizer and step
    return Contents(
        known=complete or not keys.extras,
        node=node,
        optimizer=keys.optimizer,
        step=step,
        epoch=keys.epoch,
        names=tuple(keys.names),
    )


MAX_NAMES = 8


def _names(first: tuple[str, ...], second: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*first, *second)))[:MAX_NAMES]


def _is_optimizer_state(expr: ast.expr) -> bool:
    """``optimizer.state_dict()`` (any receiver whose name mentions opt)."""
    return (
        isinstance(expr, ast.Call)
        and last_identifier(expr.func) == "state_dict"
        and "opt" in dotted(receiver(expr)).lower()
    )
