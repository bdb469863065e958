"""AR005 checkpoint-cadence: checkpoints are saved less often than every 500 steps.

What it checks
--------------
The cadence of the checkpoint saves in the training loop, read from the
guards above them (`if step % 1000 == 0`, `if iter_num % eval_interval == 0
and master_process:`, with N a literal, a module constant, a config attribute
or an argparse default). It is an error when the most frequent save runs
less often than every 500 steps (`% 500` is fine). It is a warning when the
cadence cannot be worked out (the save runs only under a condition such as
`if val_loss < best:`, once per epoch, only in an exception handler, or
behind an option whose default of 0 or None means "never"). N is followed
through function parameters (what the same-file callers pass, else the
default) and through config objects built from dataclasses or attrs classes
(`cfg.checkpoint.every`: the keyword given to the constructor, else the
field's default); when N still cannot be resolved, the message names it and
says why (`cfg['every']` read from a JSON file at run time, a value returned
by a function from elsewhere).

Guards that say which process saves or whether saving is set up, not how
often, are set aside before the cadence is read: rank and world-size checks
(`if args.rank % ngpus_per_node == 0`, `is_main_process`, `local_rank in
(-1, 0)`), `is not None` checks on names assigned once (`if saver is not
None`), and `hasattr`/`isinstance` checks. Retry loops (a `try` that leaves
its loop with `break` on success, or `for attempt in range(3)`) are not step
loops: a save after one runs at the cadence of the loop that counts steps.

Framework defaults: Lightning saves once per epoch when no `ModelCheckpoint`
is given (a warning: the steps in an epoch are not known here); a
`ModelCheckpoint` is read for `every_n_train_steps` (above 500 is an error)
and `every_n_epochs` (a warning). Hugging Face's `save_strategy="epoch"` is
a warning and `save_steps` above 500 an error (its default of 500 is fine).

The job's arguments: when a manifest job that runs the trainer sets the
option (`"args": ["train.py", "--ckpt-every", "500"]`, or `--ckpt-every=500`),
the job's value is judged, not the default, and the message says so ("500
from the job's args"); so is a nanoGPT-style module global that the job sets
with `--eval_interval=500` through `exec(open('configurator.py').read())` (its
only form; the values of a config file the job names are not read, and a
`--name=value` that one follows is not taken). Jobs that set it apart
are judged apart: the finding on the file is the worst job's, names it, and
refuses only the starts of the jobs judged as badly.

The kit: the cadence of `arena_trainer.save(...)` is read from its guard,
as for `torch.save`; `save(obj, path, step, every=N)` saves every N steps
(within a guard of M steps, every lcm(M, N)), and a guard
`if arena_trainer.due(step, every=N):` runs every N steps. Hugging Face's
`TrainingArguments.save_steps` (500 by default) is the cadence of a Hugging Face trainer, and Lightning's
`ModelCheckpoint(every_n_train_steps=N)` of a Lightning one.

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
                    "step": step}, "ckpt.pt.tmp")
        os.replace("ckpt.pt.tmp", "ckpt.pt")
        print("@arena " + json.dumps({"event": "checkpoint", "step": step,
                                      "path": "ckpt.pt"}), flush=True)
```
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator

from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.cadence import Cadence
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.loop import Framework
from arena_ls.trainer_facts.names import argument, is_false, keyword, string_value
from arena_ls.trainer_facts.reach import Path, Root

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
    cadences = [_cadence(ctx, root, path) for root, path in ctx.paths("save", ctx.saves.is_save)]
    if not cadences or any(_often_enough(cadence) for cadence in cadences):
        return
    too_rare = [c for c in cadences if c.kind == "every" and (c.steps or 0) > LIMIT]
    if too_rare:
        worst = too_rare[0]
        yield Violation(span=ctx.span(worst.node), message=f"{MESSAGE}: it saves {worst.every}")
        return
    order = {"never": 0, "unknown": 1, "epoch": 2, "handler": 3}
    # a save made when the trainer is asked to stop is no cadence: report the others first
    chosen = min(cadences, key=lambda cadence: (cadence.on_stop, order.get(cadence.kind, 9)))
    yield Violation(span=ctx.span(chosen.node), message=_warning(chosen), severity="warning")


def _cadence(ctx: TrainerContext, root: Root, path: Path) -> Cadence:
    """The guard's cadence; for the kit's ``save(..., every=N)``, every N steps within it."""
    cadence = ctx.cadence(root, path)
    target = path.target
    every = argument(target.node, 3, "every") if ctx.kit.function(target) == "save" else None
    if every is None or (isinstance(every, ast.Constant) and every.value is None):
        return cadence
    value = ctx.resolver.resolve(every, target.scope)
    steps = value.as_int()
    if steps is None or steps <= 0:
        return Cadence(kind="unknown", node=every, reason=f"every={ast.unparse(every)} is not known here")
    origin = f"`every={ast.unparse(every)}`" + (f", {value.origin}" if value.origin else "")
    if cadence.kind == "every" and cadence.steps is not None:
        # a guard of M steps around a save of every N: it saves every lcm(M, N) steps
        combined = cadence.steps * steps // math.gcd(cadence.steps, steps)
        where = origin if cadence.steps == 1 else f"{origin} within a guard of every {cadence.steps}"
        return Cadence(kind="every", node=target.node, steps=combined, origin=where)
    return cadence


def _often_enough(cadence: Cadence) -> bool:
    return cadence.kind == "every" and cadence.steps is not None and cadence.steps <= LIMIT


def _warning(cadence: Cadence) -> str:
    if cadence.kind == "never":
        return f"checkpoint cadence: {cadence.origin} by default; give it a default of at most {LIMIT} steps"
    if cadence.kind == "epoch":
        return (
            "checkpoint cadence unknown: the checkpoint is saved once per epoch, and the "
            f"number of steps in an epoch is not known here (save at most every {LIMIT} "
            "steps)"
        )
    if cadence.kind == "handler":
        return "checkpoint cadence unknown: the only save in the loop runs in an exception handler"
    if cadence.on_stop:
        return (
            "checkpoint cadence unknown: the only save in the loop runs when the trainer is "
            f"asked to stop ({cadence.reason}); also save at most every {LIMIT} steps"
        )
    return f"checkpoint cadence unknown: {cadence.reason}"


def _framework(ctx: TrainerContext, framework: Framework) -> Iterator[Violation]:
    if framework.kind == "lightning":
        yield from _lightning(ctx, framework)
        return
    strategy = string_value(framework.setting("save_strategy"))
    if strategy is not None and strategy.lower() == "epoch":
        node = framework.setting("save_strategy")
        assert node is not None
        yield Violation(
            span=ctx.span(node), severity="warning", message=_warning(Cadence(kind="epoch", node=node))
        )
        return
    yield from _too_rare(ctx, framework.setting("save_steps"), "save_steps")


def _lightning(ctx: TrainerContext, framework: Framework) -> Iterator[Violation]:
    """Lightning saves once per epoch unless a ``ModelCheckpoint`` says otherwise."""
    if is_false(framework.setting("enable_checkpointing")):
        return  # AR004 reports that
    callbacks = ctx.facts.calls_named("ModelCheckpoint")
    if not callbacks:
        yield Violation(
            span=ctx.span(framework.call.node),
            severity="warning",
            message="checkpoint cadence unknown: Lightning's default checkpoint is "
            "saved once per epoch, and the number of steps in an epoch is not known "
            f"here (add ModelCheckpoint(every_n_train_steps=N) with N <= {LIMIT})",
        )
        return
    rare: list[Violation] = []
    for site in callbacks:
        steps = keyword(site.node, "every_n_train_steps")
        if steps is not None and ctx.resolver.resolve(steps, ctx.facts.module).as_int():
            found = list(_too_rare(ctx, steps, "every_n_train_steps"))
            if not found:
                return  # one callback saves often enough
            rare.extend(found)
    if rare:
        yield rare[0]
        return
    site = callbacks[0]
    epochs = keyword(site.node, "every_n_epochs")
    where = f" (every_n_epochs={ast.unparse(epochs)})" if epochs is not None else ""
    yield Violation(
        span=ctx.span(site.node),
        severity="warning",
        message="checkpoint cadence unknown: ModelCheckpoint saves once per epoch"
        f"{where}, and the number of steps in an epoch is not known here (give it "
        f"every_n_train_steps=N with N <= {LIMIT})",
    )


def _too_rare(ctx: TrainerContext, value: ast.expr | None, label: str) -> Iterator[Violation]:
    if value is None:
        return
    resolved = ctx.resolver.resolve(value, ctx.facts.module)
    steps = resolved.as_int()
    if steps is not None and steps > LIMIT:
        origin = f" ({resolved.origin})" if resolved.origin else ""
        yield Violation(span=ctx.span(value), message=f"{MESSAGE}: {label}={steps}{origin}")


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check, per_job=True)
