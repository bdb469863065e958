"""AR001 oom-retry: the training step is not retried after a CUDA out-of-memory error.

What it checks
--------------
That the training step runs inside a `try` whose handler catches
`torch.cuda.OutOfMemoryError` (or `torch.OutOfMemoryError`, or a `RuntimeError`
whose message is checked for "out of memory") and runs the step again: the
`try` sits in a retry loop that a successful step leaves with `break`, or the
handler calls the step (or the function it is in) again. A decorator or helper
in the same file that wraps the step this way counts too. Handlers for other
errors (`StopIteration` around the data iterator, `KeyboardInterrupt` around
the loop, `OverflowError`) do not. The finding is reported at the training
loop's header.

The kit and the frameworks: `arena_trainer.oom_retry(step_fn)` in the
loop keeps this rule (it catches the OOM, empties the cache and runs the
same batch again), and so does `arena_trainer.oom_retry(loss.backward)`.
Accelerate's `find_executable_batch_size` keeps it, and so does Hugging
Face's `TrainingArguments(auto_find_batch_size=True)`. A framework's step
cannot be wrapped from outside: for a Hugging Face or Lightning trainer,
`arena_trainer.HFCallback` / `LightningCallback` passed to the trainer
counts (it empties the cache on a cadence and announces every checkpoint,
so an OOM that still ends the run is relaunched from the last one).

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
With 6 GB and no half precision, a long batch, a fragmented allocator or
another process on the GPU can push a single step over the edge hours into
a run. Without a handler the trainer dies and every step since the last
checkpoint is lost; with one it frees the cache, retries (possibly with a
smaller micro-batch) and carries on.

Example that fires
------------------
```python
for step, batch in enumerate(loader):
    loss = model(batch).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
```

Write instead
-------------
```python
for step, batch in enumerate(loader):
    for attempt in range(3):
        try:
            loss = model(batch).mean()
            loss.backward()
            break
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
    optimizer.step()
    optimizer.zero_grad()
    if step % 50 == 0:
        torch.cuda.empty_cache()
```
"""

from __future__ import annotations

from collections.abc import Iterator

from arena_ls.gates.adopt import framework_violation
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.names import is_true
from arena_ls.trainer_facts.oom import OomAnalyzer

CODE = "AR001"
NAME = "oom-retry"
MESSAGE = "no OOM-retry wrapper around the training step"


def check(ctx: TrainerContext) -> Iterator[Violation]:
    if ctx.cuda_free:
        return  # AR002 says so, once
    if _kept_by_kit_or_framework(ctx):
        return
    verdict = OomAnalyzer(ctx).verdict()
    if verdict.ok:
        return
    detail = f": {verdict.near_miss}" if verdict.near_miss else _advice(ctx)
    message = MESSAGE + ctx.training.note + detail
    if ctx.training.framework is not None:
        yield framework_violation(ctx, message)
        return
    yield Violation(span=ctx.training.anchor, message=message)


def _advice(ctx: TrainerContext) -> str:
    framework = ctx.training.framework
    if framework is None:
        return (
            ": catch torch.cuda.OutOfMemoryError, free the cache and retry the step (arena_trainer.oom_retry)"
        )
    extra = " or set auto_find_batch_size=True" if framework.kind == "hf" else ""
    return f": pass arena_trainer's callback to the trainer{extra}"


def _kept_by_kit_or_framework(ctx: TrainerContext) -> bool:
    """The kit's ``oom_retry`` in the loop, Accelerate's batch-size finder, HF's, or the kit's callback."""
    if ctx.training.kind == "loop" and ctx.paths("kit:oom_retry", ctx.kit.calls("oom_retry")):
        return True
    if ctx.facts.calls_named("find_executable_batch_size"):
        return True
    framework = ctx.training.framework
    if framework is None:
        return False
    if framework.kind == "hf" and is_true(framework.setting("auto_find_batch_size")):
        return True
    return ctx.kit.callback() is not None


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check)
