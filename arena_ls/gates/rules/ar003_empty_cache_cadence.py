"""AR003 empty-cache-cadence: `empty_cache()` runs outside every 10 to 100 steps.

What it checks
--------------
The cadence of the `torch.cuda.empty_cache()` calls in the training loop,
read from the guards above them (`if step % 50 == 0`, `if (step + 1) % N == 0`,
`if step and not step % N`, those inside `and`/`or`, with N a literal, a
module constant, a config attribute or an argparse default). It fires when
no call runs every 10 to 100 steps: on every step, once per epoch, only in an
exception handler, never by default (a 0 or None default), or at a cadence
it cannot work out (it says so).

The kit: `arena_trainer.empty_cache(step, every=N)` runs every N steps
(50 when `every` is not given), whatever guard is written around it.

As for AR005, an option a manifest job sets in its `args` is judged with
the job's value, each job apart.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Each `empty_cache()` synchronises the GPU and makes the allocator start
over, so calling it every step costs throughput; calling it once an epoch
lets fragmentation build up until a step runs out of memory. Every 10 to
100 steps keeps a 6 GB card's peak flat for a few milliseconds a minute.

Example that fires
------------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch.cuda.empty_cache()
```

Write instead
-------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 50 == 0:
        torch.cuda.empty_cache()
```
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.cadence import Cadence
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.kit import EMPTY_CACHE_EVERY
from arena_ls.trainer_facts.names import argument
from arena_ls.trainer_facts.reach import Path, Root

CODE = "AR003"
NAME = "empty-cache-cadence"
MESSAGE = "empty_cache cadence outside every 10 to 100 steps"
LOW, HIGH = 10, 100


def check(ctx: TrainerContext) -> Iterator[Violation]:
    if ctx.cuda_free:
        return  # AR002 says so, once
    cadences = [_cadence(ctx, root, path) for root, path in ctx.paths("empty_cache", ctx.empties_cache)]
    if not cadences or any(_in_range(cadence) for cadence in cadences):
        return
    outside_handlers = [cadence for cadence in cadences if cadence.kind != "handler"]
    chosen = outside_handlers[0] if outside_handlers else cadences[0]
    yield Violation(span=ctx.span(chosen.node), message=f"{MESSAGE}: {_describe(chosen)}")


def _cadence(ctx: TrainerContext, root: Root, path: Path) -> Cadence:
    """The guard's cadence; for the kit's ``empty_cache(step, every=N)``, N (50 by default)."""
    target = path.target
    if ctx.kit.function(target) != "empty_cache":
        return ctx.cadence(root, path)
    every = argument(target.node, 1, "every")
    if every is None:
        return Cadence(kind="every", node=target.node, steps=EMPTY_CACHE_EVERY, origin="the kit's default")
    value = ctx.resolver.resolve(every, target.scope)
    steps = value.as_int()
    if steps is None or steps <= 0:
        return Cadence(
            kind="unknown", node=target.node, reason=f"every={ast.unparse(every)} is not known here"
        )
    return Cadence(kind="every", node=target.node, steps=steps, origin=value.origin)


def _in_range(cadence: Cadence) -> bool:
    return cadence.kind == "every" and cadence.steps is not None and (LOW <= cadence.steps <= HIGH)


def _describe(cadence: Cadence) -> str:
    if cadence.kind == "every" and cadence.steps == 1:
        return "it runs on every step"
    if cadence.kind == "every":
        return f"it runs {cadence.every}"
    if cadence.kind == "never":
        return f"{cadence.origin} by default"
    if cadence.kind == "epoch":
        return "it runs once per epoch, not every few steps"
    if cadence.kind == "handler":
        return "it runs only in an exception handler"
    return f"the cadence cannot be determined: {cadence.reason}"


RULE = declare(__doc__, CODE, NAME, MESSAGE, "warning", check, per_job=True)
