'''AR005 checkpoint-cadence: checkpoints are saved less often than every 500 steps.

What it checks
--------------
The cadence of the checkpoint saves in the training loop, read from the
guards above them (`if step % 1000 == 0`, `if iter_num % eval_interval == 0
and master_process:`, with N a literal, a module constant, a config attribute
or an argparse default). It is an error when the most frequent save runs
less often than every 500 steps (`% 500` is fine). It is a warning when the
cadence cannot be worked out (the save runs only under a condition such as
`if val_loss < best:`, once per epoch, only in an exception handler, or
behind an option whose default of 0 or None means "never"). For framework
trainers it reads `every_n_train_steps` (Lightning's `ModelCheckpoint`) and
`save_steps` (Hugging Face).

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
On an FP32-only laptop GPU 500 steps of a small model are already several
minutes of work. Saving less often than that means each crash, sleep or
stop can throw away more than that.

Example that fires
------------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 2000 == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, "ckpt.pt")
```

Write instead
-------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 250 == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, "ckpt.pt")
```
'''

from __future__ import annotations

import ast
from collections.abc import Iterator

from arena_ls.gates.cadence import Cadence
from arena_ls.gates.context import TrainerContext
from arena_ls.gates.loop import Framework
from arena_ls.gates.names import keyword, string_value
from arena_ls.gates.rules.base import Rule, Violation, parse_doc

CODE = "AR005"
NAME = "checkpoint-cadence"
MESSAGE = "checkpoint cadence above 500 steps"
LIMIT = 500


def check(ctx: TrainerContext) -> Iterator[Violation]:
    training = ctx.training
    if training.framework is not None:
        yield from _framework(ctx, training.framework)
        return
    if training.kind != "loop":
        return
    cadences = [ctx.cadence(root, path) for root, path in ctx.paths("save", ctx.saves.is_save)]
    if not cadences or any(_often_enough(cadence) for cadence in cadences):
        return
    too_rare = [c for c in cadences if c.kind == "every" and (c.steps or 0) > LIMIT]
    if too_rare:
        worst = too_rare[0]
        yield Violation(span=ctx.span(worst.node),
                        message=f"{MESSAGE}: it saves {worst.every}")
        return
    order = {"never": 0, "unknown": 1, "epoch": 2, "handler": 3}
    chosen = min(cadences, key=lambda cadence: order.get(cadence.kind, 9))
    yield Violation(span=ctx.span(chosen.node), message=_warning(chosen), severity="warning")


def _often_enough(cadence: Cadence) -> bool:
    return cadence.kind == "every" and cadence.steps is not None and cadence.steps <= LIMIT


def _warning(cadence: Cadence) -> str:
    if cadence.kind == "never":
        return (f"checkpoint cadence: {cadence.origin} by default; "
                f"give it a default of at most {LIMIT} steps")
    if cadence.kind == "epoch":
        return ("checkpoint cadence unknown: the checkpoint is saved once per epoch, and the "
                f"number of steps in an epoch is not known here (save at most every {LIMIT} "
                "steps)")
    if cadence.kind == "handler":
        return "checkpoint cadence unknown: the only save in the loop runs in an exception handler"
    return f"checkpoint cadence unknown: {cadence.reason}"


def _framework(ctx: TrainerContext, framework: Framework) -> Iterator[Violation]:
    if framework.kind == "lightning":
        for site in ctx.facts.calls_named("ModelCheckpoint"):
            value = keyword(site.node, "every_n_train_steps")
            yield from _too_rare(ctx, value, "every_n_train_steps")
        return
    strategy = string_value(framework.setting("save_strategy"))
    if strategy is not None and strategy.lower() == "epoch":
        node = framework.setting("save_strategy")
        assert node is not None
        yield Violation(span=ctx.span(node), severity="warning",
                        message=_warning(Cadence(kind="epoch", node=node)))
        return
    yield from _too_rare(ctx, framework.setting("save_steps"), "save_steps")


def _too_rare(ctx: TrainerContext, value: ast.expr | None, label: str) -> Iterator[Violation]:
    if value is None:
        return
    resolved = ctx.resolver.resolve(value, ctx.facts.module)
    steps = resolved.as_int()
    if steps is not None and steps > LIMIT:
        origin = f" ({resolved.origin})" if resolved.origin else ""
        yield Violation(span=ctx.span(value),
                        message=f"{MESSAGE}: {label}={steps}{origin}")


RULE = Rule(code=CODE, name=NAME, message=MESSAGE, severity="error", fix_title=None,
            doc=parse_doc(__doc__), check=check)
