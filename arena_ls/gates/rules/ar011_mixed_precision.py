'''AR011 mixed-precision: half precision or TF32 on a GPU profiled as FP32-only.

What it checks
--------------
Only when the device profile says FP32-only (setting `device.fp32Only`, or
a Pascal or older GPU): `autocast(...)`, `GradScaler(...)`, `.half()` and
`.bfloat16()`, `torch.float16`/`torch.bfloat16`/`torch.half`, TF32 switches
(`torch.backends.cuda.matmul.allow_tf32 = True`,
`torch.set_float32_matmul_precision("high")`), and the framework spellings
(`fp16=True`, `bf16=True`, `tf32=True`, `precision="16-mixed"`,
`mixed_precision="bf16"`, `torch_dtype="float16"`). It does not fire on
`autocast(enabled=False)`, an autocast or dtype of float32, text in
docstrings, half precision used only to export weights (after the training
loop, or in a function that exports or saves), or precision chosen outside
the file.

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
'''

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from arena_ls.gates.context import TrainerContext
from arena_ls.gates.facts import Chain, Scope
from arena_ls.gates.names import dotted, is_false, is_true, keyword, string_value
from arena_ls.gates.rules.base import Rule, Violation, parse_doc

CODE = "AR011"
NAME = "mixed-precision"
MESSAGE = "mixed precision while the device profile is FP32-only"
_HALF_TEXT = re.compile(r"^(b?f(loat)?16|half|bf16|fp16|16|16-mixed|bf16-mixed|16-true"
                        r"|bf16-true|fp8|int8)$", re.IGNORECASE)
_EXPORT_FUNCTION = re.compile(r"export|convert|save|dump|publish|push|upload|quantiz",
                              re.IGNORECASE)
_FLAG_KEYWORDS = frozenset({"fp16", "bf16", "tf32", "half_precision_backend", "use_amp", "amp"})
_TEXT_KEYWORDS = frozenset({"precision", "mixed_precision", "torch_dtype"})


def check(ctx: TrainerContext) -> Iterator[Violation]:
    if ctx.fp32_only is not True or ctx.cuda_free:
        return
    seen: set[int] = set()
    for node, what in sorted(_sites(ctx), key=lambda item: (item[0].lineno,
                                                            item[0].col_offset)):
        if node.lineno in seen:
            continue
        seen.add(node.lineno)
        yield Violation(span=ctx.span(node), message=f"{MESSAGE}: {what}")


def _sites(ctx: TrainerContext) -> Iterator[tuple[ast.expr | ast.stmt | ast.keyword, str]]:
    after = _after_training(ctx)
    for site in ctx.facts.calls:
        found: list[tuple[ast.expr | ast.keyword, str]] = []
        reason = _call(ctx, site.node, site.name, site.scope)
        if reason:
            found.append((site.node, reason))
        for item in site.node.keywords:
            reason = _keyword(ctx, item, site.scope)
            if reason:
                found.append((item, reason))
        if found and not _for_export(site.scope, site.chain, site.node, after):
            yield from found
    for ref in ctx.facts.dtype_refs:
        if isinstance(ref.node, ast.Attribute) and dotted(ref.node.value) == "torch" and not (
                _for_export(ref.scope, ref.chain, ref.node, after)):
            yield ref.node, f"torch.{ref.node.attr}"
    for assignment in ctx.facts.attr_assigns.get("allow_tf32", []):
        value = ctx.resolver.resolve(assignment.value, assignment.scope)
        if value.known and value.value is True:
            yield assignment.stmt, "TF32 is switched on"


def _call(ctx: TrainerContext, call: ast.Call, name: str, scope: Scope) -> str:
    if name == "autocast":
        if is_false(keyword(call, "enabled")):
            return ""
        dtype = keyword(call, "dtype")
        if dtype is not None and dotted(dtype).endswith("float32"):
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
        if isinstance(text, (str, int)) and not isinstance(text, bool) and _HALF_TEXT.match(
                str(text)):
            return f"{item.arg}={text!r}"
    return ""


def _after_training(ctx: TrainerContext) -> tuple[Scope, int] | None:
    """The scope of the training loop and the line where it ends."""
    loop = ctx.training.loop
    if loop is None:
        return None
    return loop.scope, loop.node.end_lineno or loop.node.lineno


def _for_export(scope: Scope, chain: Chain, node: ast.AST,
                after: tuple[Scope, int] | None) -> bool:
    """Half precision used to export weights: after the loop, or in an export function."""
    current: Scope | None = scope
    while current is not None:
        if current.kind == "function" and _EXPORT_FUNCTION.search(current.name):
            return True
        current = current.parent
    if after is not None:
        loop_scope, end = after
        if scope is loop_scope and getattr(node, "lineno", 0) > end:
            return True
    return False


RULE = Rule(code=CODE, name=NAME, message=MESSAGE, severity="warning", fix_title=None,
            doc=parse_doc(__doc__), check=check)
