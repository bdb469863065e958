"""How often a call in the training loop runs, read from the guards above it.

Guards are the ``if`` statements between the training loop and the call
(across the functions on the path). ``step % N == 0``, ``(step + 1) % N == 0``,
``not step % N`` and those forms inside ``and``/``or`` give a cadence of N
steps; N is resolved through constants, config attributes and argparse
defaults. A default of 0 or None means "never" and is never taken as N.
Conditions that hold for the whole run (rank checks, ``args.x is not None``)
do not change the cadence; other conditions (``val_loss < best``) make it
unknown. A call that sits in an outer loop beside the step loop runs once
per epoch.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from typing import Literal

from arena_ls.trainer_facts.facts import LOOP_TYPES, CallSite, Chain, LoopSite, ModuleFacts, Scope
from arena_ls.trainer_facts.kit import Kit
from arena_ls.trainer_facts.loop import is_retry_loop
from arena_ls.trainer_facts.names import argument, dotted
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.reach import CallGraph, Path, Root
from arena_ls.trainer_facts.sites import is_backward, is_optimizer_step
from arena_ls.trainer_facts.values import Resolver, Value

CadenceKind = Literal["every", "never", "unknown", "epoch", "handler"]

_NEUTRAL_NAME = lazy(
    r"rank|master|main_process|is_main|global_zero|world_process_zero|sync_gradients"
    r"|local_main|is_distributed|ddp|accelerator|device|cuda|is_available|output_dir|save_dir"
    r"|out_dir|checkpoint_dir|ckpt_dir|push_to_hub|wandb|tensorboard",
    re.IGNORECASE,
)
_CONFIG_ROOTS = frozenset(
    {
        "args",
        "opt",
        "opts",
        "cfg",
        "config",
        "conf",
        "hparams",
        "hp",
        "flags",
        "FLAGS",
        "params",
        "training_args",
        "train_args",
        "options",
        "settings",
        "hps",
    }
)
_STEP_HOOKS = lazy(
    r"^(training_step|on_(train_)?batch_(start|end)|on_step_(begin|end)"
    r"|on_before_optimizer_step|on_after_backward|on_before_backward"
    r"|on_optimizer_step)$"
)
_EPOCH_HOOKS = lazy(r"^on_\w*epoch\w*$")
_SMALL_BOUND = 10


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Cadence:
    """How often a call runs: every N steps, never, once per epoch, on errors only, or unknown."""

    kind: CadenceKind
    node: ast.AST
    steps: int | None = None
    origin: str = ""
    """Where N came from (empty for a literal); for "never", the whole explanation."""
    reason: str = ""
    on_stop: bool = False
    """The call runs only when the trainer is asked to stop (a stop-file poll, a stop flag)."""

    @property
    def every(self) -> str:
        """``every 50 steps`` with where 50 came from, for messages."""
        where = f" ({self.origin})" if self.origin else ""
        return f"every {self.steps} steps{where}"


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class _Term:
    divisor: ast.expr
    node: ast.expr
    scope: Scope


class CadenceAnalyzer:
    """Reads the cadence of the target of a path from one training root."""

    def __init__(self, facts: ModuleFacts, graph: CallGraph, resolver: Resolver) -> None:
        self.facts = facts
        self.graph = graph
        self.resolver = resolver
        self.has_optimizer_step = any(is_optimizer_step(site) for site in facts.calls)
        self.kit = Kit(facts)
        self._stepping: dict[int, bool] = {}

    def cadence(self, root: Root, path: Path) -> Cadence:
        where: ast.AST = path.first.node
        terms: list[_Term] = []
        dynamic: list[ast.expr] = []
        for index, (site, chain) in enumerate(_segments(path)):
            outer = root.node if index == 0 else site.scope.node
            for test in _early_exit_tests(outer, chain, site.node.lineno):
                terms.extend(
                    _Term(divisor, expr, site.scope)
                    for divisor, expr in _modulo_terms(test, positive=False)
                    if not _is_rank_modulo(expr)
                )
            for node, field in chain:
                if isinstance(node, ast.ExceptHandler) and field == "body":
                    return Cadence(kind="handler", node=where)
                if not isinstance(node, ast.If) or field not in ("body", "orelse"):
                    continue
                # rank guards (``rank % ngpus == 0``) say which process saves, not how often
                found = [
                    (divisor, expr)
                    for divisor, expr in _modulo_terms(node.test, positive=field == "body")
                    if not _is_rank_modulo(expr)
                ]
                found.extend(self._due_terms(node.test, positive=field == "body"))
                # a test with a modulo term is the cadence guard (its ``or last_step`` is fine)
                terms.extend(_Term(divisor, expr, site.scope) for divisor, expr in found)
                if not found and not self._is_neutral(node.test, site.scope):
                    dynamic.append(node.test)
        epoch_level = self._epoch_level(root, path)
        if dynamic:
            return Cadence(
                kind="unknown",
                node=dynamic[0],
                reason=f"it runs only when `{_text(dynamic[0])}`",
                on_stop=any(_is_stop_check(test) for test in dynamic),
            )
        if terms:
            return self._from_terms(terms, epoch_level)
        if epoch_level:
            return Cadence(kind="epoch", node=where)
        if isinstance(root, Scope) and not _STEP_HOOKS.match(root.name):
            return Cadence(
                kind="unknown", node=where, reason=f"it runs in `{root.name}`, whose cadence is not known"
            )
        return Cadence(kind="every", node=where, steps=1)

    def _from_terms(self, terms: list[_Term], epoch_level: bool) -> Cadence:
        resolved: list[tuple[int, _Term, str]] = []
        unresolved: list[tuple[_Term, Value]] = []
        for term in terms:
            value = self.resolver.resolve(term.divisor, term.scope)
            number = value.as_int()
            origin = _origin(term.divisor, value.origin)
            if value.known and (number is None or number <= 0):
                shown = "None" if value.value is None else repr(value.value)
                subject = f"`{_text(term.divisor)}`"
                where = (
                    f" ({value.origin})"
                    if value.origin and not isinstance(term.divisor, ast.Constant)
                    else ""
                )
                return Cadence(
                    kind="never", node=term.node, origin=f"{subject}{where} is {shown}, so it never runs"
                )
            if number is None:
                unresolved.append((term, value))
            else:
                resolved.append((number, term, origin))
        if resolved:
            steps, term, origin = max(resolved, key=lambda item: item[0])
            kind: CadenceKind = "epoch" if epoch_level else "every"
            return Cadence(kind=kind, node=term.node, steps=steps, origin=origin)
        term, value = unresolved[0]
        text = _text(term.divisor)
        why = f" ({value.origin})" if value.origin and value.origin != text else ""
        return Cadence(
            kind="unknown", node=term.node, reason=f"the value of `{text}` cannot be resolved{why}"
        )

    def _due_terms(self, test: ast.expr, positive: bool) -> Iterator[tuple[ast.expr, ast.expr]]:
        """``(every, call)`` for each ``arena_trainer.due(step, every=N)`` the test holds on."""
        if isinstance(test, ast.BoolOp):
            for value in test.values:
                yield from self._due_terms(value, positive)
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            yield from self._due_terms(test.operand, not positive)
        elif positive and isinstance(test, ast.Call) and self.kit.name_of(test.func) == "due":
            every = argument(test, 1, "every")
            if every is not None:
                yield every, test

    # levels ----------------------------------------------------------------------

    def _epoch_level(self, root: Root, path: Path) -> bool:
        """True when the target runs beside a stepping loop rather than inside one."""
        if isinstance(root, Scope):
            return bool(_EPOCH_HOOKS.match(root.name))
        innermost: LoopSite = root
        for node, field in path.links():
            if isinstance(node, LOOP_TYPES) and field in ("body", "test") and (not is_retry_loop(node)):
                inner = self.facts.loop_site(node)
                if inner is not None:
                    innermost = inner
        on_path = {id(node) for node, _field in path.links()}
        return any(
            id(loop.node) not in on_path and not is_retry_loop(loop.node) and self._is_stepping(loop)
            for loop in self.graph.nested_loops(innermost)
        )

    def _is_stepping(self, loop: LoopSite) -> bool:
        """A loop that takes optimizer steps (or, with no visible step, calls backward)."""
        cached = self._stepping.get(id(loop))
        if cached is None:
            if self.has_optimizer_step:
                cached = self.graph.reaches(loop, "optimizer_step", is_optimizer_step)
            else:
                cached = self.graph.reaches(loop, "backward", is_backward)
            self._stepping[id(loop)] = cached
        return cached

    # guards ----------------------------------------------------------------------

    def _is_neutral(self, test: ast.expr, scope: Scope) -> bool:
        """A condition that does not change how often the call runs.

        Rank and device checks, config flags and type checks hold (or not) for
        the whole run; ``iter_num > 0`` holds after the first steps; an ``or``
        with an operand that is always true always holds. ``val_loss < best``
        is none of these.
        """
        if isinstance(test, ast.BoolOp):
            if isinstance(test.op, ast.Or) and any(self._always_true(v, scope) for v in test.values):
                return True
            return all(self._is_neutral(value, scope) for value in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self._is_neutral(test.operand, scope)
        for node in ast.walk(test):
            if isinstance(node, ast.Attribute) and _NEUTRAL_NAME.search(node.attr):
                return True
            if isinstance(node, ast.Name) and _NEUTRAL_NAME.search(node.id):
                return True
        if (
            isinstance(test, ast.Call)
            and isinstance(test.func, ast.Name)
            and (test.func.id in ("isinstance", "hasattr", "callable"))
        ):
            return True
        if self._after_warmup(test, scope) or self._set_once_check(test, scope):
            return True
        return all(self._is_config(node, scope) for node in _operands(test))

    def _set_once_check(self, test: ast.expr, scope: Scope) -> bool:
        """``saver is not None`` (or ``is None``) on a name assigned at most once: loop-invariant."""
        if not (
            isinstance(test, ast.Compare)
            and len(test.ops) == 1
            and isinstance(test.ops[0], (ast.Is, ast.IsNot))
        ):
            return False
        left, right = test.left, test.comparators[0]
        if not (isinstance(right, ast.Constant) and right.value is None):
            return False
        if isinstance(left, ast.Attribute):
            names = dotted(left).split(".")
            return bool(names[0]) and len(self.facts.attr_assigns.get(left.attr, [])) <= 1
        if not isinstance(left, ast.Name):
            return False
        if left.id in scope.params():
            return True  # a parameter does not change inside the function's loop
        return len(self.facts.all_assignments(left.id)) <= 1

    def _always_true(self, expr: ast.expr, scope: Scope) -> bool:
        value = self.resolver.resolve(expr, scope)
        return value.known and bool(value.value)

    def _after_warmup(self, test: ast.expr, scope: Scope) -> bool:
        """``step > 0``, ``iter_num >= warmup_iters``, ``step != 0``: true after the first steps.

        ``iter_num > max_iters`` is the opposite (true only at the end), so the bound
        must be a small number or be named as a warm-up.
        """
        if not isinstance(test, ast.Compare) or len(test.ops) != 1:
            return False
        left, op, right = test.left, test.ops[0], test.comparators[0]
        if isinstance(op, (ast.Lt, ast.LtE)):
            left, right = right, left
        elif not isinstance(op, (ast.Gt, ast.GtE, ast.NotEq)):
            return False
        if not isinstance(left, (ast.Name, ast.Attribute)):
            return False
        bound = self.resolver.resolve(right, scope).as_int()
        if bound is None:
            return False
        return bound <= _SMALL_BOUND or "warmup" in _text(right).lower()

    def _is_config(self, expr: ast.expr, scope: Scope) -> bool:
        if isinstance(expr, ast.Constant):
            return True
        if isinstance(expr, ast.Attribute):
            names = dotted(expr).split(".")
            if names[0] == "self":  # self.args.x is config; self.iter_num is not
                return len(names) > 2 and names[1] in _CONFIG_ROOTS
            return names[0] in _CONFIG_ROOTS
        if isinstance(expr, ast.Name):
            if expr.id in _CONFIG_ROOTS or expr.id.isupper():
                return True
            assignments = self.facts.all_assignments(expr.id)
            return bool(assignments) and all(
                self.resolver.resolve(item.value, item.scope, item.stmt.lineno).known for item in assignments
            )
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            return expr.func.id in ("isinstance", "hasattr", "callable", "len") and all(
                self._is_config(arg, scope) for arg in expr.args
            )
        return False


def _segments(path: Path) -> Iterator[tuple[CallSite, Chain]]:
    yield path.first, path.first_chain
    for site in path.sites[1:]:
        yield site, site.chain


_BLOCK_FIELDS = frozenset({"body", "orelse", "finalbody"})


def _early_exit_tests(outer: ast.AST, chain: Chain, line: int) -> Iterator[ast.expr]:
    """Tests of ``if <test>: continue`` (or ``return``) guards before the call, in its blocks.

    ``if step % 100 != 0: continue`` makes the rest of the loop body run every 100 steps.
    """
    blocks: list[list[ast.stmt]] = [getattr(outer, "body", [])]
    blocks.extend(
        getattr(node, field)
        for node, field in chain
        if field in _BLOCK_FIELDS and isinstance(getattr(node, field, None), list)
    )
    for block in blocks:
        for stmt in block:
            if (stmt.end_lineno or stmt.lineno) >= line:
                break
            if (
                isinstance(stmt, ast.If)
                and not stmt.orelse
                and len(stmt.body) == 1
                and (isinstance(stmt.body[0], (ast.Continue, ast.Return)))
            ):
                yield stmt.test


def _modulo_terms(test: ast.expr, positive: bool) -> Iterator[tuple[ast.expr, ast.expr]]:
    """``(divisor, expression)`` for each ``x % N`` test that holds every N steps."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _modulo_terms(value, positive)
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        yield from _modulo_terms(test.operand, not positive)
    elif _is_counter_modulo(test):
        assert isinstance(test, ast.BinOp)
        if not positive:  # ``if step % N: ... else: <here>``
            yield test.right, test
    elif isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        modulo = left if _is_counter_modulo(left) else right if _is_counter_modulo(right) else None
        other = right if modulo is left else left
        if modulo is None or not isinstance(other, (ast.Constant, ast.Name, ast.Attribute, ast.BinOp)):
            return
        assert isinstance(modulo, ast.BinOp)
        op = test.ops[0]
        if (isinstance(op, ast.Eq) and positive) or (isinstance(op, ast.NotEq) and not positive):
            yield modulo.right, test


def _is_counter_modulo(expr: ast.expr) -> bool:
    """``step % N`` on a counter; not ``"%d" % step`` string formatting."""
    return (
        isinstance(expr, ast.BinOp)
        and isinstance(expr.op, ast.Mod)
        and not isinstance(expr.left, (ast.Constant, ast.JoinedStr))
    )


_STOP = lazy(r"stop|ARENA_STOP_FILE|interrupt|terminat|preempt", re.IGNORECASE)


def _is_stop_check(test: ast.expr) -> bool:
    """``os.path.exists(stop_file)``, ``if stop:``, ``if should_stop()``: the stop path."""
    return bool(_STOP.search(ast.unparse(test)))


_RANK_NAME = lazy(r"rank|process_index|local_process|gpu_id|device_id|worker_id", re.IGNORECASE)


def _is_rank_modulo(test: ast.expr) -> bool:
    """``rank % ngpus_per_node == 0``: which process runs it, not how often."""
    modulo = test
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        modulo = test.left if isinstance(test.left, ast.BinOp) else test.comparators[0]
    if not (isinstance(modulo, ast.BinOp) and isinstance(modulo.op, ast.Mod)):
        return False
    left = modulo.left
    name = left.id if isinstance(left, ast.Name) else (left.attr if isinstance(left, ast.Attribute) else "")
    return bool(name) and bool(_RANK_NAME.search(name))


def _operands(test: ast.expr) -> Iterator[ast.expr]:
    """The leaves of a condition, through ``and``/``or``/``not`` and comparisons."""
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            yield from _operands(value)
    elif isinstance(test, ast.UnaryOp):
        yield from _operands(test.operand)
    elif isinstance(test, ast.Compare):
        yield from _operands(test.left)
        for item in test.comparators:
            yield from _operands(item)
    else:
        yield test


def _origin(divisor: ast.expr, where: str) -> str:
    """Where N came from, for messages; empty for a literal N."""
    if isinstance(divisor, ast.Constant):
        return ""
    text = _text(divisor)
    return f"`{text}`, {where}" if where else f"`{text}`"


def _text(expr: ast.AST) -> str:
    text = ast.unparse(expr)
    return text if len(text) <= 60 else text[:57] + "..."
