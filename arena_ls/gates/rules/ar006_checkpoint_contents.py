"""AR006 checkpoint-contents: the saved checkpoint lacks the optimizer state or the step.

What it checks
--------------
What the checkpoint saved in the training loop carries. The saved dict is
read where it is written: a literal, a variable built before the save (the
assignment in effect at the save, plus `ckpt["key"] = ...` and
`ckpt.update(...)`), an argument passed to a same-file save helper, or the
dict a same-file function returns. It needs the optimizer state
(`optimizer.state_dict()` or a key containing "optim") and the step (`step`,
`iter_num`, `global_step`, `epoch` with `batch`; `epoch` alone for a save
made once per epoch; for `accelerator.save_state`, the step in the folder
name such as `f"step_{step}"`). A whole-module pickle, `torch.save(model, f)`,
carries neither. When several saves sit side by side (under the same
statement of the loop, directly or in the helpers called there), what they
carry together counts; a dict it cannot read is given the benefit of the
doubt. The message names the keys the checkpoint does hold (`EPOCHS_RUN`
is an epoch: the position of a save made once per epoch).

The kit: `arena_trainer.save(obj, path, step)` carries the step itself (it
announces it, and `arena_trainer.resume_step()` gives it back), so `obj`
needs the model's and the optimizer's state only.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Resuming from weights alone restarts Adam's moments from zero, which
throws the run back by hundreds of steps and often spikes the loss; without
the step the learning-rate schedule and the data order restart too. On a
slow FP32-only GPU that is the work the checkpoint was meant to keep.

Example that fires
------------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 200 == 0:
        torch.save(model.state_dict(), "ckpt.pt")
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

import dataclasses
from collections.abc import Iterator

from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.checkpoints import Contents
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.reach import Path, Root

CODE = "AR006"
NAME = "checkpoint-contents"
MESSAGE = "the saved checkpoint lacks the optimizer state or the step"


def check(ctx: TrainerContext) -> Iterator[Violation]:
    training = ctx.training
    if training.framework is not None:
        return
    if training.kind == "loop":
        found = ctx.paths("save", ctx.saves.is_save)
    else:
        module: Root = ctx.facts.module
        found = [(module, path) for path in _single_site_paths(ctx)]
    groups: dict[tuple[int, ...], Contents] = {}
    for root, path in found:
        contents = _accepting_epoch(ctx, root, path, ctx.saves.contents(path))
        key = (*(id(node) for node, _field in path.first_chain), id(path.first.scope))
        groups[key] = groups[key].merge(contents) if key in groups else contents
    verdicts = list(groups.values())
    if not verdicts or any(c.optimizer and c.step for c in verdicts):
        return
    known = [c for c in verdicts if c.known]
    if not known:
        return
    chosen = known[0]
    yield Violation(span=ctx.span(chosen.node), message=_message(chosen))


def _accepting_epoch(ctx: TrainerContext, root: Root, path: Path, contents: Contents) -> Contents:
    """A save made once per epoch that records the epoch has its position."""
    if contents.epoch and not contents.step and ctx.cadence(root, path).kind == "epoch":
        return dataclasses.replace(contents, step=True, epoch=True)
    return contents


def _single_site_paths(ctx: TrainerContext) -> list[Path]:
    return [
        Path(sites=(site,), first_chain=site.chain) for site in ctx.facts.calls if ctx.saves.is_save(site)
    ]


def _message(contents: Contents) -> str:
    if contents.whole_module:
        return (
            "the saved checkpoint lacks the optimizer state and the step: it pickles the "
            "whole module; save a dict with the model's and the optimizer's state_dict() "
            "and the step"
        )
    missing = [
        name
        for name, present in (("the optimizer state", contents.optimizer), ("the step", contents.step))
        if not present
    ]
    held = ", ".join(contents.names[:6])
    if not held:
        there = ""
    elif contents.epoch and contents.step and not contents.optimizer:
        there = f" (it holds {held}: the epoch is the position of a save made once per epoch)"
    else:
        there = f" (it holds {held})"
    return f"the saved checkpoint lacks {' and '.join(missing)}{there}"


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check)
