"""AR009 cooperative-stop: the trainer cannot be asked to stop.

What it checks
--------------
That the trainer can stop cleanly: the training loop polls the stop file
(`os.path.exists(os.environ["ARENA_STOP_FILE"])`, `Path(stop_file).exists()`
on a variable that names the stop file), or the file installs a SIGTERM or
SIGINT handler (`signal.signal(signal.SIGTERM, handler)`). On Windows
SIGTERM cannot be delivered, so there the trainer needs the stop file or a
`SIGBREAK` handler; the message says so. An
`os.path.exists` on a data or output path is not a stop-file poll, and a
handler set to `SIG_IGN`/`SIG_DFL` does not count. Lightning handles SIGTERM
itself, so Lightning trainers pass. The finding is reported at the training
loop's header.

The kit and the frameworks: `arena_trainer.should_stop()` in the loop
counts (it watches the stop file, SIGTERM, SIGINT and, on Windows,
CTRL_BREAK). For a Hugging Face or Lightning trainer,
`arena_trainer.HFCallback` / `LightningCallback` passed to the trainer
counts: it turns a stop into a save and the end of training.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
Stopping a run to use the laptop for something else (or before it runs out
of battery) should save a checkpoint and exit, not throw away the steps
since the last one. `arena stop` creates `ARENA_STOP_FILE` (or sends
SIGTERM) and waits; a trainer that never looks is killed after the grace
period.

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
def save_checkpoint(step):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "step": step}, "ckpt.pt.tmp")
    os.replace("ckpt.pt.tmp", "ckpt.pt")
    print("@arena " + json.dumps({"event": "checkpoint", "step": step,
                                  "path": "ckpt.pt"}), flush=True)


stop_file = os.environ.get("ARENA_STOP_FILE", "STOP")
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 250 == 0:
        save_checkpoint(step)
    if os.path.exists(stop_file):
        save_checkpoint(step)
        break
```
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from arena_ls.gates.adopt import framework_violation
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import CallSite
from arena_ls.trainer_facts.names import argument, dotted, receiver, string_value
from arena_ls.trainer_facts.patterns import lazy

CODE = "AR009"
NAME = "cooperative-stop"
MESSAGE = "no cooperative stop: neither a stop-file poll nor a SIGTERM/SIGINT handler"
WINDOWS = (
    "; on Windows, where SIGTERM cannot be delivered, the trainer needs the stop file "
    "(poll ARENA_STOP_FILE) or a SIGBREAK handler"
)
_EXISTS = frozenset({"exists", "isfile", "is_file", "lexists"})
_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGBREAK"})
_NOT_HANDLERS = frozenset({"SIG_DFL", "SIG_IGN", "default_int_handler"})
_STOP_TEXT = lazy(r"ARENA_STOP_FILE|stop_?file|(?<![A-Za-z0-9])stop(?![A-Za-z0-9])", re.IGNORECASE)


def check(ctx: TrainerContext) -> Iterator[Violation]:
    training = ctx.training
    if training.framework is not None and training.framework.kind == "lightning":
        return
    if any(_installs_handler(site) for site in ctx.facts.calls):
        return
    kit_polls = ctx.kit.calls("should_stop")
    if training.framework is not None and ctx.kit.callback() is not None:
        return
    if training.kind == "loop" and ctx.paths("kit:should_stop", kit_polls):
        return
    stop_file = _StopFilePolls(ctx)
    polls = [site for site in ctx.facts.calls if stop_file.polls(site)]
    if training.kind == "loop":
        if polls and ctx.paths("stop_poll", stop_file.polls):
            return
        if polls:
            yield Violation(
                span=training.anchor,
                message=f"{MESSAGE} (the stop file is checked at line "
                f"{polls[0].node.lineno}, outside the training loop){WINDOWS}",
            )
            return
    elif polls:
        return
    if training.framework is not None:
        yield framework_violation(ctx, MESSAGE + training.note + WINDOWS)
        return
    yield Violation(span=training.anchor, message=MESSAGE + training.note + WINDOWS)


def _installs_handler(site: CallSite) -> bool:
    """``signal.signal(signal.SIGTERM, handler)`` or ``loop.add_signal_handler(SIGINT, ...)``."""
    if site.name not in ("signal", "add_signal_handler") or len(site.node.args) < 2:
        return False
    number, handler = site.node.args[0], site.node.args[1]
    if dotted(number).split(".")[-1] not in _SIGNALS:
        return False
    return dotted(handler).split(".")[-1] not in _NOT_HANDLERS


class _StopFilePolls:
    """Which ``exists()`` calls look at the stop file rather than at data or outputs."""

    def __init__(self, ctx: TrainerContext) -> None:
        self.ctx = ctx
        self._variables: dict[str, bool] = {}
        self._verdicts: dict[int, bool] = {}

    def polls(self, site: CallSite) -> bool:
        if site.name not in _EXISTS:
            return False
        verdict = self._verdicts.get(id(site))
        if verdict is None:
            target = _checked_path(site)
            verdict = target is not None and self._names_stop_file(target)
            self._verdicts[id(site)] = verdict
        return verdict

    def _names_stop_file(self, expr: ast.expr, depth: int = 0) -> bool:
        """``ARENA_STOP_FILE``, a ``stop_file`` name, or a variable assigned from one."""
        names: list[str] = []
        for node in ast.walk(expr):
            if _mentions_stop(node):
                return True
            if isinstance(node, ast.Name):
                names.append(node.id)
        return depth < 2 and any(self._variable_names_stop_file(name, depth) for name in names)

    def _variable_names_stop_file(self, name: str, depth: int) -> bool:
        verdict = self._variables.get(name)
        if verdict is None:
            self._variables[name] = False  # a cycle (a = b; b = a) reads as "no"
            verdict = any(
                self._names_stop_file(item.value, depth + 1) for item in self.ctx.facts.all_assignments(name)
            )
            self._variables[name] = verdict
        return verdict


def _checked_path(site: CallSite) -> ast.expr | None:
    """``x`` in ``os.path.exists(x)``, ``Path(x).exists()`` and ``x.exists()``."""
    func = site.node.func
    if isinstance(func, ast.Attribute) and dotted(func.value) in ("os.path", "path", "osp"):
        return argument(site.node, 0, "path")
    target = receiver(site.node)
    if isinstance(target, ast.Call) and target.args:
        return target.args[0]
    return target


def _mentions_stop(node: ast.AST) -> bool:
    text = string_value(node)
    if text is not None:
        return bool(_STOP_TEXT.search(text))
    name = node.id if isinstance(node, ast.Name) else (node.attr if isinstance(node, ast.Attribute) else None)
    return name is not None and bool({"stop", "stopfile"} & set(name.lower().split("_")))


RULE = declare(__doc__, CODE, NAME, MESSAGE, "warning", check)
