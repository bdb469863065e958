"""AR004 checkpoint-in-loop: the training loop never saves a checkpoint.

What it checks
--------------
That the training loop saves a checkpoint: `torch.save`,
`accelerator.save_state`, `trainer.save_checkpoint`, safetensors'
`save_file`, Lightning Fabric's `fabric.save`, or a same-file function that
calls one of those. Saves nested
under extra conditions count; a save after the loop does not. When the loop
is inside a framework, its own checkpointing counts unless it is turned off
(Lightning's `enable_checkpointing=False`, Hugging Face's
`save_strategy="no"`). The finding is reported at the training loop's header.

The kit: `arena_trainer.save(obj, path, step)` in the loop is a save (a
temporary file, flushed, `os.replace`, then announced). Hugging Face's
Trainer saves every `save_steps` by itself, and Lightning's every epoch.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A laptop run is interrupted by sleep, a closed lid, a driver reset or an
out-of-memory kill far more often than a server run. A trainer that saves
only at the end loses everything when that happens, and without half
precision each lost hour is slower to make up.

Example that fires
------------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
torch.save(model.state_dict(), "final.pt")
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
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, "ckpt.pt.tmp")
        os.replace("ckpt.pt.tmp", "ckpt.pt")
        print("@arena " + json.dumps({"event": "checkpoint", "step": step,
                                      "path": "ckpt.pt"}), flush=True)
```
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.names import is_false, string_value

CODE = "AR004"
NAME = "checkpoint-in-loop"
MESSAGE = "no checkpoint save in the training loop"


def check(ctx: TrainerContext) -> Iterator[Violation]:
    training = ctx.training
    anywhere = ctx.first_call(ctx.saves.is_save)
    if training.kind == "loop":
        if ctx.paths("save", ctx.saves.is_save):
            return
        after = (
            f" (the save at line {anywhere.node.lineno} runs outside the loop)"
            if anywhere is not None
            else ""
        )
        yield Violation(span=training.anchor, message=MESSAGE + after)
        return
    framework = training.framework
    if framework is not None:
        off = _checkpointing_off(
            framework.setting("enable_checkpointing"), framework.setting("save_strategy")
        )
        if off:
            yield Violation(span=training.anchor, message=f"{MESSAGE}{training.note}: {off}")
        return
    if anywhere is None:
        yield Violation(span=training.anchor, message=MESSAGE + training.note)


def _checkpointing_off(enable: ast.expr | None, strategy: ast.expr | None) -> str:
    if is_false(enable):
        return "its checkpointing is turned off (enable_checkpointing=False)"
    text = string_value(strategy)
    if text is None and isinstance(strategy, ast.Attribute):
        text = strategy.attr
    if text is not None and text.lower() == "no":
        return 'its checkpointing is turned off (save_strategy="no")'
    return ""


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check)
