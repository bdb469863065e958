"""AR010 dataloader-workers: a DataLoader starts worker processes (`num_workers` > 0).

What it checks
--------------
`torch.utils.data.DataLoader(...)` (and torchdata's `StatefulDataLoader`)
calls whose `num_workers` is above 0: a literal, a constant, or an argparse
default such as `--num-workers` with `default=4`; `os.cpu_count()` counts as
above 0. It also reads Hugging Face's `dataloader_num_workers`, and
`num_workers` passed through `**kwargs`: a dict built as a literal, with
`dict(...)`, `{**a, **b}`, `kwargs.update({...})` or `kwargs["num_workers"] =
...`, in this function or an enclosing one; a value set on any path counts,
even under a condition (`if use_cuda: kwargs.update(...)`), and the message
names the line and the condition. An attribute (`num_workers=self.workers`)
counts when one of its assignments gives a value above 0, even if another
(`self.workers = int(self.workers / num_processes)`) cannot be read. It
leaves alone what it cannot see (a dict built in another file), options that feed `datasets.map`
(`preprocessing_num_workers`), and a project's own loader classes
(`DistributedDataLoader`). The quick fix sets the literal to 0.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Each worker is a separate process with its own copy of the dataset
object and its own Python heap; on a laptop with 16 GB of RAM,
four workers over an in-memory dataset can push the machine into swap or
the kernel's OOM killer, which kills the trainer without a traceback. A
small model on a laptop GPU rarely waits on data loading anyway.

Example that fires
------------------
```python
loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=4)
```

Write instead
-------------
```python
loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=0)
```
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator

from arena_ls.gates.model import TextEdit
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import CallSite
from arena_ls.trainer_facts.names import argument, keyword_node
from arena_ls.trainer_facts.splats import splat_entries
from arena_ls.trainer_facts.values import Value

CODE = "AR010"
NAME = "dataloader-workers"
MESSAGE = "a DataLoader with num_workers > 0"
FIX_TITLE = "Set num_workers to 0"
_LOADERS = frozenset({"DataLoader", "StatefulDataLoader"})
_NUM_WORKERS_POSITION = 5


def check(ctx: TrainerContext) -> Iterator[Violation]:
    for site in ctx.facts.calls:
        if site.name in _LOADERS and site.name not in ctx.facts.classes:
            yield from _loader(ctx, site, "num_workers", _NUM_WORKERS_POSITION)
        elif site.name.endswith("TrainingArguments") or site.name == "SFTConfig":
            yield from _loader(ctx, site, "dataloader_num_workers", None)


def _loader(ctx: TrainerContext, site: CallSite, name: str, position: int | None) -> Iterator[Violation]:
    item = keyword_node(site.node, name)
    value_expr: ast.expr | None = item.value if item is not None else None
    where: ast.AST | None = item
    if value_expr is None and position is not None:
        value_expr = argument(site.node, position, name)
        where = value_expr
    if value_expr is None or where is None:
        yield from _through_splats(ctx, site, name)
        return
    value = ctx.resolver.resolve(value_expr, site.scope)
    if not value.known and not value.positive and isinstance(value_expr, ast.Attribute):
        value = _set_on_some_path(ctx, value_expr) or value
    workers = value.as_int()
    if not (value.positive or (workers is not None and workers > 0)):
        return
    shown = (
        f"{name}={workers}" if workers is not None else f"{name} from {value.counted_by or 'the CPU count'}"
    )
    origin = f", {value.origin}" if value.origin and not isinstance(value_expr, ast.Constant) else ""
    yield Violation(
        span=ctx.span(where),
        message=f"{MESSAGE} ({shown}{origin}): each worker is another process holding a copy of the dataset",
        edits=_fix(ctx, value),
    )


def _set_on_some_path(ctx: TrainerContext, attribute: ast.Attribute) -> Value | None:
    """``num_workers=self.workers``: a positive value one assignment of ``.workers`` gives.

    The resolver wants every assignment to agree; a Lightning module that sets
    ``self.workers = workers`` (default 4) and, on a parallel strategy only,
    ``self.workers = int(self.workers / num_processes)`` has one it cannot read.
    As for ``**kwargs``, a value set on any path counts.
    """
    for assignment in ctx.facts.attr_assigns.get(attribute.attr, []):
        value = ctx.resolver.resolve(assignment.value, assignment.scope, assignment.stmt.lineno)
        workers = value.as_int()
        if value.positive or (workers is not None and workers > 0):
            where = f"{attribute.attr} at line {assignment.stmt.lineno}"
            origin = f"{value.origin}, {where}" if value.origin else where
            return dataclasses.replace(value, origin=origin)
    return None


def _through_splats(ctx: TrainerContext, site: CallSite, name: str) -> Iterator[Violation]:
    """``DataLoader(ds, **kwargs)``: a value for ``name`` set in ``kwargs`` on any path."""
    for item in site.node.keywords:
        if item.arg is not None:
            continue
        for entry in splat_entries(ctx.facts, item.value, site.scope, name):
            value = ctx.resolver.resolve(entry.value, entry.scope, entry.value.lineno)
            workers = value.as_int()
            if not (value.positive or (workers is not None and workers > 0)):
                continue
            counted = value.counted_by or "the CPU count"
            shown = f"{name}={workers}" if workers is not None else f"{name} from {counted}"
            yield Violation(
                span=ctx.span(item),
                message=f"{MESSAGE} ({shown} through **{ast.unparse(item.value)}, "
                f"{entry.path}): each worker is another process holding a copy "
                "of the dataset",
                edits=_fix(ctx, value),
            )
            return


def _fix(ctx: TrainerContext, value: Value) -> tuple[TextEdit, ...]:
    node = value.node
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool) or not isinstance(node.value, int):
        return ()
    span = ctx.span(node)
    return (TextEdit(span.line, span.col, span.end_line, span.end_col, "0"),)


RULE = declare(__doc__, CODE, NAME, MESSAGE, "warning", check, fix_title=FIX_TITLE)
