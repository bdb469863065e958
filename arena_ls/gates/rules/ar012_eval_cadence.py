"""AR012 eval-cadence: evaluation runs more often than every 20 steps.

What it checks
--------------
The cadence of evaluation in the training loop: calls such as
`evaluate(...)`, `validate(...)`, `estimate_loss()`, `model.eval()`, or a
`with torch.no_grad():` block that loops over validation data, read from
the guards above them (`if iter_num % eval_interval == 0 and master_process:`).
It fires when an evaluation runs more often than every 20 steps, or when
its cadence cannot be worked out (it says so). A guard whose body only logs
(`if step % 10 == 0: print(...)`) is not evaluation. Options that default
to 0 or None ("never") do not fire. For framework trainers it reads
Lightning's `val_check_interval` and Hugging Face's `eval_steps`.

As for AR005, an option a manifest job sets in its `args` is judged with
the job's value, each job apart.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
An evaluation pass holds a second set of activations and, without half
precision, runs at full FP32 cost. Doing it every few steps can double the
run's length and push peak memory past 6 GB when the eval batch is larger
than the training batch.

Example that fires
------------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 5 == 0:
        evaluate(model, val_loader)
```

Write instead
-------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 200 == 0:
        evaluate(model, val_loader)
```
"""

from __future__ import annotations

from collections.abc import Iterator

from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.cadence import Cadence
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.loop import Framework
from arena_ls.trainer_facts.names import string_value
from arena_ls.trainer_facts.sites import is_evaluation

CODE = "AR012"
NAME = "eval-cadence"
MESSAGE = "evaluation more often than every 20 steps"
LIMIT = 20


def check(ctx: TrainerContext) -> Iterator[Violation]:
    training = ctx.training
    if training.framework is not None:
        yield from _framework(ctx, training.framework)
        return
    if training.kind != "loop":
        return
    by_call: dict[int, Cadence] = {}
    for root, path in ctx.paths("evaluation", is_evaluation):
        by_call.setdefault(id(path.first), ctx.cadence(root, path))
    cadences = list(by_call.values())
    too_often = [c for c in cadences if c.kind == "every" and (c.steps or 0) < LIMIT]
    if too_often:
        chosen = too_often[0]
        every = "on every step" if chosen.steps == 1 else chosen.every
        yield Violation(span=ctx.span(chosen.node), message=f"{MESSAGE}: it runs {every}")
        return
    unknown = [c for c in cadences if c.kind == "unknown"]
    if unknown:
        yield Violation(
            span=ctx.span(unknown[0].node), message=f"evaluation cadence unknown: {unknown[0].reason}"
        )


def _framework(ctx: TrainerContext, framework: Framework) -> Iterator[Violation]:
    if framework.kind == "lightning":
        node = framework.setting("val_check_interval")
    else:
        strategy = framework.setting("eval_strategy") or framework.setting("evaluation_strategy")
        if (string_value(strategy) or "").lower() != "steps":
            return
        node = framework.setting("eval_steps")
    if node is None:
        return
    value = ctx.resolver.resolve(node, ctx.facts.module)
    if isinstance(value.value, float) and not isinstance(value.value, bool):
        return  # a fraction of an epoch
    steps = value.as_int()
    if steps is not None and 0 < steps < LIMIT:
        yield Violation(span=ctx.span(node), message=f"{MESSAGE}: it runs every {steps} steps")


RULE = declare(__doc__, CODE, NAME, MESSAGE, "warning", check, per_job=True)
