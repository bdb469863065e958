"""AR002 empty-cache: the training loop never calls `torch.cuda.empty_cache()`.

What it checks
--------------
That `torch.cuda.empty_cache()` is called somewhere in the training loop,
directly or through a same-file function the loop calls. When the loop is
inside a framework, a call anywhere in the file (a callback) counts. The
finding is reported at the training loop's header.

A trainer that never uses CUDA (it imports torch but mentions no `cuda`
device, `.cuda()`, `torch.cuda`, `torch.accelerator` or GPU anywhere, and uses no library that
picks the GPU itself) is exempt from AR001-AR003 and AR011; this rule then
reports one information diagnostic saying so, which blocks nothing.

The kit and the frameworks: `arena_trainer.empty_cache(step)` in the loop
counts (imported under any name), and for a Hugging Face or Lightning
trainer so does `arena_trainer.HFCallback` / `LightningCallback` passed in
`callbacks=[...]` or to `trainer.add_callback(...)`. A trainer that imports
neither torch (nor a package that runs on it) nor a CUDA library, such as a
Flax, JAX or TensorFlow trainer, gets no CUDA rule at all.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
PyTorch's caching allocator keeps freed blocks for reuse. With variable
sequence lengths the cache fragments, and on a 6 GB card the next large
allocation fails even though enough memory is free in total. Emptying the
cache now and then returns those blocks and keeps the peak flat.

Example that fires
------------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
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

from collections.abc import Iterator

from arena_ls.gates.adopt import framework_violation
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext

CODE = "AR002"
NAME = "empty-cache"
MESSAGE = "no torch.cuda.empty_cache() in the training loop"


CUDA_FREE = (
    "this trainer never uses CUDA (no cuda device, no .cuda(), no torch.cuda, no torch.accelerator), so "
    "the GPU rules AR001-AR003 and AR011 do not apply to it"
)
TORCH_FREE = (
    "this trainer imports neither torch nor a CUDA library, so the GPU rules AR001-AR003 and AR011 "
    "do not apply to it"
)


def check(ctx: TrainerContext) -> Iterator[Violation]:
    training = ctx.training
    if ctx.torch_free:
        if training.kind != "none":
            yield Violation(span=training.anchor, message=TORCH_FREE, severity="information")
        return
    if ctx.cuda_free:
        yield Violation(span=training.anchor, message=CUDA_FREE, severity="information")
        return
    empties = ctx.empties_cache
    anywhere = ctx.first_call(empties)
    if training.kind == "loop":
        if ctx.paths("empty_cache", empties):
            return
        elsewhere = (
            f" (the call at line {anywhere.node.lineno} is outside the loop)" if anywhere is not None else ""
        )
        yield Violation(span=training.anchor, message=MESSAGE + elsewhere)
        return
    if anywhere is None and ctx.kit.callback() is None:
        hint = (
            ": pass arena_trainer's callback to the trainer (it empties the cache every 50 steps)"
            if training.framework
            else ""
        )
        if training.framework is not None:
            yield framework_violation(ctx, MESSAGE + training.note + hint)
            return
        yield Violation(span=training.anchor, message=MESSAGE + training.note + hint)


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check)
