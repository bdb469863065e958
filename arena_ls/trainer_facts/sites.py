"""What kind of call a call site is: backward, optimizer step, save, evaluation..."""

from __future__ import annotations

import ast
import re

from arena_ls.trainer_facts.facts import CallSite
from arena_ls.trainer_facts.names import dotted, last_identifier, receiver
from arena_ls.trainer_facts.patterns import lazy

SAVE_NAMES = frozenset({"save", "save_state", "save_checkpoint", "save_file"})
_EVAL_NAME = lazy(
    r"^(evaluate|evaluation|validate|validation|run_validation|run_eval|run_evaluation|do_eval"
    r"|estimate_loss|eval_\w+|evaluate_\w+|validate_\w+|\w+_eval|\w+_evaluate|\w+_validation"
    r"|\w+_validate)$"
)
_PREDICATE_NAME = lazy(r"^(should|is|can|need|needs|time_to|when|has)_")
_EVAL_ITERABLE = lazy(r"val|eval|test|dev|holdout", re.IGNORECASE)


def is_backward(site: CallSite) -> bool:
    """``loss.backward()``, ``scaler.scale(loss).backward()``, ``accelerator.backward(loss)``;
    also the kit's ``oom_retry(loss.backward)``, which calls it."""
    if site.name == "oom_retry":
        return any(isinstance(arg, ast.Attribute) and arg.attr == "backward" for arg in site.node.args)
    return site.name == "backward" and isinstance(site.node.func, ast.Attribute)


def is_optimizer_step(site: CallSite) -> bool:
    """``optimizer.step()``, ``scaler.step(optimizer)``, ``engine.step()``; not a scheduler."""
    if site.name != "step":
        return False
    owner = dotted(receiver(site.node)).lower()
    return ("opt" in owner or owner.endswith("scaler") or "engine" in owner) and ("sched" not in owner)


def is_empty_cache(site: CallSite) -> bool:
    return site.name == "empty_cache"


def is_save_call(site: CallSite) -> bool:
    """``torch.save``, ``accelerator.save_state``, ``trainer.save_checkpoint``, ``save_file``.

    The caller makes sure a name that is a same-file function (a helper called
    ``save_checkpoint``) is followed into instead of taken for the library call.
    """
    name = site.name
    if name not in SAVE_NAMES:
        return False
    func = site.node.func
    if name == "save":
        # torch.save / th.save / Lightning Fabric's fabric.save; not np.save or json.save
        return isinstance(func, ast.Attribute) and (
            dotted(func.value) in ("torch", "th") or last_identifier(func.value) == "fabric"
        )
    return True


def is_evaluation(site: CallSite) -> bool:
    """A call that runs an evaluation: ``model.eval()``, ``evaluate(...)``, ``estimate_loss()``.

    ``with torch.no_grad():`` over a loop on a validation set counts too. Logging
    calls never do: a guard that only logs is not evaluation.
    """
    func = site.node.func
    if site.name == "eval":
        return isinstance(func, ast.Attribute) and not site.node.args
    if _EVAL_NAME.match(site.name):
        return not _PREDICATE_NAME.match(site.name)
    if site.name in ("no_grad", "inference_mode") and site.chain:
        node, field = site.chain[-1]
        if isinstance(node, (ast.With, ast.AsyncWith)) and field == "items":
            return _loops_over_eval_data(node.body)
    return False


def _loops_over_eval_data(body: list[ast.stmt]) -> bool:
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            if _EVAL_ITERABLE.search(ast.unparse(stmt.iter)):
                return True
        elif isinstance(stmt, ast.While) and _EVAL_ITERABLE.search(ast.unparse(stmt.test)):
            return True
    return False


def is_oom_type(expr: ast.expr | None) -> bool:
    """``torch.cuda.OutOfMemoryError``, ``torch.OutOfMemoryError`` or a tuple holding one."""
    if isinstance(expr, ast.Tuple):
        return any(is_oom_type(item) for item in expr.elts)
    return dotted(expr).split(".")[-1] == "OutOfMemoryError"
