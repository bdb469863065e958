"""AR011 mixed-precision: half precision or TF32 on a GPU profiled as FP32-only.

What it checks
--------------
Only when the device profile says FP32-only (setting `device.fp32Only`, or
a Pascal or older GPU): `autocast(...)`, `GradScaler(...)`, `.half()` and
`.bfloat16()`, `torch.float16`/`torch.bfloat16`/`torch.half`, TF32 switches
(`torch.backends.cuda.matmul.allow_tf32 = True`,
`torch.set_float32_matmul_precision("high")`), and the framework spellings
(`fp16=True`, `bf16=True`, `tf32=True`, `precision="16-mixed"`,
`mixed_precision="bf16"`, `torch_dtype="float16"`). It reports uses, not mentions: a comparison
(`x.dtype == torch.float16`), `isinstance`, an entry of a dtype table that
no lookup selects with the defaults, or the branch of `a if c else b` the
defaults do not take are not uses. The defaults of options are respected:
code that runs only under an option whose default is float32 or off (`if
args.dtype == "float16":` with `default="float32"`, `if args.tensorcores:`
with `store_true`, `autocast(enabled=args.amp)`, `if args.validation_prompts is not
None:` with a default of None, and a function that only such code calls, such as
diffusers' `log_validation`) does not fire. Nor do
`autocast(enabled=False)`, an autocast or dtype of float32, text in
docstrings, half precision used only to export weights (after the training
loop, or in an export function: one named `export_*`, `write_*`, `save_*`...,
or one that writes a file and has no backward in its reach; a function that
runs the framework's `trainer.train()` / `fit()` before its `save_pretrained`
trains, so it is no export function), or precision
chosen outside the file.

A trainer that imports neither torch (nor a package that runs on it) nor a
CUDA library gets no CUDA rule, this one included.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A GPU without tensor cores (Pascal and older) has no fast half-precision
math: FP16 runs at a fraction of FP32 speed, bf16 is emulated or missing,
and TF32 does not exist. Mixed precision there makes training slower, and
GradScaler's skipped steps and overflow checks add instability for no
memory win worth having.

Example that fires
------------------
```python
scaler = torch.cuda.amp.GradScaler()
with torch.autocast("cuda", dtype=torch.float16):
    loss = model(x).mean()
scaler.scale(loss).backward()
```

Write instead
-------------
```python
loss = model(x).mean()
loss.backward()
```
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import Chain, Scope, iter_statements
from arena_ls.trainer_facts.names import dotted, is_false, is_true, keyword, string_value
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.sites import is_backward

CODE = "AR011"
NAME = "mixed-precision"
MESSAGE = "mixed precision while the device profile is FP32-only"
_HALF_TEXT = lazy(
    r"^(b?f(loat)?16|half|bf16|fp16|16|16-mixed|bf16-mixed|16-true"
    r"|bf16-true|fp8|int8)$",
    re.IGNORECASE,
)
_EXPORT_FUNCTION = lazy(r"export|convert|save|dump|publish|push|upload|quantiz|^write_", re.IGNORECASE)
_FLAG_KEYWORDS = frozenset({"fp16", "bf16", "tf32", "half_precision_backend", "use_amp", "amp"})
_TEXT_KEYWORDS = frozenset({"precision", "mixed_precision", "torch_dtype"})


def check(ctx: TrainerContext) -> Iterator[Violation]:
    if ctx.fp32_only is not True or ctx.cuda_free:
        return
    seen: set[int] = set()
    for node, what in sorted(_sites(ctx), key=lambda item: (item[0].lineno, item[0].col_offset)):
        if node.lineno in seen:
            continue
        seen.add(node.lineno)
        yield Violation(span=ctx.span(node), message=f"{MESSAGE}: {what}")


def _sites(ctx: TrainerContext) -> Iterator[tuple[ast.expr | ast.stmt | ast.keyword, str]]:
    after = _after_training(ctx)
    uses = _Uses(ctx)
    for site in ctx.facts.calls:
        found: list[tuple[ast.expr | ast.keyword, str]] = []
        reason = _call(ctx, site.node, site.name, site.scope)
        if reason:
            found.append((site.node, reason))
        for item in site.node.keywords:
            reason = _keyword(ctx, item, site.scope)
            if reason:
                found.append((item, reason))
        if (
            found
            and not _for_export(ctx, site.scope, site.node, after)
            and uses.active(site.chain, site.scope)
        ):
            yield from found
    for ref in ctx.facts.dtype_refs:
        if (
            isinstance(ref.node, ast.Attribute)
            and dotted(ref.node.value) == "torch"
            and not (_for_export(ctx, ref.scope, ref.node, after))
            and uses.is_use(ref.node)
            and (uses.active(ref.chain, ref.scope))
        ):
            yield ref.node, f"torch.{ref.node.attr}"
    for assignment in ctx.facts.attr_assigns.get("allow_tf32", []):
        value = ctx.resolver.resolve(assignment.value, assignment.scope)
        if value.known and value.value is True and uses.active_at(assignment.stmt, assignment.scope):
            yield assignment.stmt, "TF32 is switched on"


class _Uses:
    """Tells a use of half precision from a mention, and code the defaults never run.

    A dtype in a comparison (``x.dtype == torch.float16``) or ``isinstance`` is
    a mention; so is an entry of a dtype table (``{"float16": torch.float16}``)
    that the lookups never select with the options' defaults, and the branch
    of ``a if cond else b`` that the defaults do not take. Code under an ``if``
    that is false with the defaults (``if args.dtype == "float16":`` with a
    float32 default, ``if args.tensorcores:`` with ``store_true``) is not run.
    """

    def __init__(self, ctx: TrainerContext) -> None:
        self.ctx = ctx
        self._parents: dict[int, ast.AST] | None = None
        self._calling: set[int] = set()

    def parents(self) -> dict[int, ast.AST]:
        if self._parents is None:
            self._parents = {
                id(child): node for node in ast.walk(self.ctx.tree) for child in ast.iter_child_nodes(node)
            }
        return self._parents

    def is_use(self, node: ast.AST) -> bool:
        parents = self.parents()
        child: ast.AST = node
        parent = parents.get(id(child))
        while parent is not None and not isinstance(parent, ast.stmt):
            if isinstance(parent, ast.Compare):
                return False
            if (
                isinstance(parent, ast.Call)
                and isinstance(parent.func, ast.Name)
                and (parent.func.id in ("isinstance", "getattr", "hasattr"))
            ):
                return False
            if isinstance(parent, ast.IfExp) and child is not parent.test:
                taken = self._truth(parent.test, self._scope_of(node))
                if taken is not None and (child is parent.body) != taken:
                    return False
            if isinstance(parent, ast.Dict) and child in parent.values:
                selected = self._selected_keys(parent)
                key = parent.keys[parent.values.index(child)]
                if selected is not None and string_value(key) not in selected:
                    return False
            child, parent = parent, parents.get(id(parent))
        return True

    def _scope_of(self, node: ast.AST) -> Scope:
        line = getattr(node, "lineno", 0)
        best = self.ctx.facts.module
        for scope in self.ctx.facts.scopes:
            start = getattr(scope.node, "lineno", 0)
            end = getattr(scope.node, "end_lineno", 0) or start
            if scope.kind == "function" and start <= line <= end and start >= getattr(best.node, "lineno", 0):
                best = scope
        return best

    def _selected_keys(self, table: ast.Dict) -> set[str] | None:
        """The keys the lookups of a dtype table select with the defaults (None: unknown)."""
        parents = self.parents()
        parent = parents.get(id(table))
        lookups: list[tuple[ast.expr, Scope]] = []
        if isinstance(parent, ast.Subscript) and parent.value is table:
            lookups.append((parent.slice, self._scope_of(parent)))
        elif (
            isinstance(parent, ast.Assign)
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
        ):
            name = parent.targets[0].id
            for node in ast.walk(self.ctx.tree):
                if (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.value, ast.Name)
                    and (node.value.id == name)
                ):
                    lookups.append((node.slice, self._scope_of(node)))
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and (
                        node.func.attr == "get"
                        and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == name
                        and node.args
                    )
                ):
                    lookups.append((node.args[0], self._scope_of(node)))
        if not lookups:
            return None
        keys: set[str] = set()
        for key, scope in lookups:
            value = self.ctx.resolver.resolve(key, scope, getattr(key, "lineno", 0))
            if not value.known or not isinstance(value.value, str):
                return None
            keys.add(value.value)
        return keys

    def active(self, chain: Chain, scope: Scope) -> bool:
        """False when an ``if`` around the code is false with the options' defaults, or when the
        code is in a function that only such code calls (diffusers' ``log_validation``, called
        under ``if args.validation_prompts is not None`` with a default of None)."""
        for node, field in chain:
            if isinstance(node, ast.If) and field in ("body", "orelse"):
                truth = self._truth(node.test, scope)
                if truth is not None and truth != (field == "body"):
                    return False
        return not self._only_called_where_off(scope)

    def _only_called_where_off(self, scope: Scope) -> bool:
        """True for a function every same-file call of which is inactive, and that is not used otherwise."""
        if scope.kind != "function" or id(scope) in self._calling:
            return False
        calls = [site for site in self.ctx.facts.calls if site.name == scope.name and site.scope is not scope]
        names = sum(
            1 for node in ast.walk(self.ctx.tree) if isinstance(node, ast.Name) and node.id == scope.name
        )
        if not calls or names != len(calls) or not all(isinstance(s.node.func, ast.Name) for s in calls):
            return False  # never called here, or passed along (a callback): it may run
        self._calling.add(id(scope))
        try:
            return not any(self.active(site.chain, site.scope) for site in calls)
        finally:
            self._calling.discard(id(scope))

    def active_at(self, stmt: ast.stmt, scope: Scope) -> bool:
        for node in iter_statements(getattr(scope.node, "body", [])):
            if isinstance(node, ast.If) and node.lineno < stmt.lineno <= (node.end_lineno or node.lineno):
                in_body = any(item is stmt for item in iter_statements(node.body))
                truth = self._truth(node.test, scope)
                if truth is not None and truth != in_body:
                    return False
        return True

    def _truth(self, test: ast.expr, scope: Scope) -> bool | None:
        """The value of a condition with the defaults, or None when it is not known."""
        if isinstance(test, ast.BoolOp):
            values = [self._truth(value, scope) for value in test.values]
            if isinstance(test.op, ast.And):
                if False in values:
                    return False
                return True if all(value is True for value in values) else None
            if True in values:
                return True
            return False if all(value is False for value in values) else None
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._truth(test.operand, scope)
            return None if inner is None else not inner
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left = self._value(test.left, scope)
            right = self._value(test.comparators[0], scope)
            if left is _UNKNOWN or right is _UNKNOWN:
                return None
            op = test.ops[0]
            try:
                if isinstance(op, ast.Eq):
                    return bool(left == right)
                if isinstance(op, ast.NotEq):
                    return bool(left != right)
                if isinstance(op, ast.In):
                    return bool(left in right)  # type: ignore[operator]
                if isinstance(op, ast.NotIn):
                    return bool(left not in right)  # type: ignore[operator]
                if isinstance(op, (ast.Is, ast.IsNot)) and (left is None or right is None):
                    same = left is right  # an option defaulting to None is off: `is not None` is False
                    return same if isinstance(op, ast.Is) else not same
            except TypeError:
                return None
            return None
        if isinstance(test, (ast.Name, ast.Attribute)):
            value = self.ctx.resolver.resolve(test, scope, test.lineno)
            return bool(value.value) if value.known else None
        return None

    def _value(self, expr: ast.expr, scope: Scope) -> object:
        if isinstance(expr, (ast.Tuple, ast.List, ast.Set)):
            items = [self._value(item, scope) for item in expr.elts]
            return _UNKNOWN if _UNKNOWN in items else tuple(items)
        if isinstance(expr, ast.Attribute) and dotted(expr.value) == "torch":
            return f"torch.{expr.attr}"
        value = self.ctx.resolver.resolve(expr, scope, getattr(expr, "lineno", 0))
        return value.value if value.known else _UNKNOWN


_UNKNOWN = object()


def _call(ctx: TrainerContext, call: ast.Call, name: str, scope: Scope) -> str:
    if name == "autocast":
        enabled = keyword(call, "enabled")
        if is_false(enabled):
            return ""
        if enabled is not None:
            switch = ctx.resolver.resolve(enabled, scope)
            if switch.known and not switch.value:
                return ""  # an option that is off by default
        dtype = keyword(call, "dtype")
        if dtype is not None and dotted(dtype).endswith("float32"):
            return ""
        if dtype is not None:
            chosen = ctx.resolver.resolve(dtype, scope)
            if chosen.known and isinstance(chosen.value, str) and "32" in chosen.value:
                return ""
        return "autocast"
    if name == "GradScaler":
        enabled = keyword(call, "enabled")
        value = ctx.resolver.resolve(enabled, scope) if enabled is not None else None
        if value is not None and value.known and not value.value:
            return ""
        return "GradScaler"
    if name in ("half", "bfloat16") and isinstance(call.func, ast.Attribute) and not call.args:
        return f".{name}()"
    if name == "set_float32_matmul_precision":
        level = string_value(call.args[0]) if call.args else None
        if level in ("high", "medium"):
            return f'set_float32_matmul_precision("{level}") turns on TF32'
    return ""


def _keyword(ctx: TrainerContext, item: ast.keyword, scope: Scope) -> str:
    if item.arg in _FLAG_KEYWORDS:
        if is_true(item.value):
            return f"{item.arg}=True"
        value = ctx.resolver.resolve(item.value, scope)
        if value.known and value.value is True:
            return f"{item.arg} is on ({value.origin})" if value.origin else f"{item.arg}=True"
        return ""
    if item.arg in _TEXT_KEYWORDS:
        value = ctx.resolver.resolve(item.value, scope)
        text = value.value if value.known else None
        if isinstance(text, (str, int)) and not isinstance(text, bool) and _HALF_TEXT.match(str(text)):
            return f"{item.arg}={text!r}"
    return ""


def _after_training(ctx: TrainerContext) -> tuple[Scope, int] | None:
    """The scope of the training loop and the line where it ends."""
    loop = ctx.training.loop
    if loop is None:
        return None
    return loop.scope, loop.node.end_lineno or loop.node.lineno


def _for_export(ctx: TrainerContext, scope: Scope, node: ast.AST, after: tuple[Scope, int] | None) -> bool:
    """Half precision used to export weights: after the loop, or in an export function.

    An export function is named so (``export_*``, ``write_*``, ``save_*``...) or
    does what one does: it writes to a file and no backward is in its reach.
    """
    current: Scope | None = scope
    while current is not None:
        if current.kind == "function" and (
            _EXPORT_FUNCTION.search(current.name) or _writes_without_training(ctx, current)
        ):
            return True
        current = current.parent
    if after is not None:
        loop_scope, end = after
        if scope is loop_scope and getattr(node, "lineno", 0) > end:
            return True
    return False


_WRITES = frozenset(
    {
        "write",
        "tofile",
        "save",
        "save_file",
        "dump",
        "writelines",
        "write_bytes",
        "write_text",
        "save_pretrained",
    }
)


def _writes_without_training(ctx: TrainerContext, function: Scope) -> bool:
    """A function that writes a file (``f.write``, ``tofile``, ``torch.save``) and reaches no
    backward: exporting, not training."""
    if not any(site.name in _WRITES for site in function.calls):
        return False
    if ctx.training.loop is not None and ctx.training.loop.scope is function:
        return False
    if _runs_the_framework(ctx, function):
        return False  # trainer.train() then save_pretrained (alpaca-lora's train()): training, not exporting
    return not ctx.graph.reaches(function, "backward", is_backward)


RULE = declare(__doc__, CODE, NAME, MESSAGE, "warning", check)


def _runs_the_framework(ctx: TrainerContext, function: Scope) -> bool:
    """The framework's training call (``trainer.train()``, ``trainer.fit()``) runs in ``function``.

    Directly, in a function nested in it, or in a same-file function it calls.
    """
    framework = ctx.training.framework
    if framework is None:
        return False
    scope: Scope | None = framework.call.scope
    while scope is not None:
        if scope is function:
            return True
        scope = scope.parent
    return framework.call.scope in ctx.graph.reached_scopes(function.calls)
