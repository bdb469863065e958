"""AR014 checkpoint-announce: checkpoints are saved but the step saved is never announced.

What it checks
--------------
That a trainer whose training loop saves checkpoints also tells the
supervisor the step it saved, in a line it prints: an `@arena` checkpoint
line (`print("@arena " + json.dumps({"event": "checkpoint", "step": step,
"path": path}), flush=True)`), a line that the job's `checkpoint.pattern`
matches, or, for a job without a `checkpoint.pattern`, a line in one of the
built-in spellings the supervisor reads then: `saved checkpoint to PATH at step N` (also `Saving
checkpoint ... step=N`), `checkpoint saved ... step N`, and Hugging Face's
`Saving model checkpoint to out/checkpoint-N`. The file's strings (f-strings,
`%` and `.format` templates, `print` with several arguments) are read as the
lines they print; docstrings do not count. Framework trainers (Lightning,
Hugging Face's Trainer) are not checked: give their job a
`checkpoint.pattern`. Every save the loop makes on its way (not only once, on
stop or at the end) must be announced beside it: in its block, in the helper
that saves, or in the loop's block that calls that helper; a trainer that
announces only its stop save fires too. The finding is reported at the save.
Its quick fix prints the `@arena` checkpoint line after each silent save (and
adds `import json` where needed).

The kit: `arena_trainer.save(obj, path, step)` announces what it saved,
and `arena_trainer.checkpoint(step, path)` beside any other save (an
`accelerator.save_state(...)`) announces it, with its `bytes` and `sha256`.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A checkpoint the supervisor does not know about cannot be resumed from:
`arena stop` refuses to call the run resumable, and the watchdog relaunches a
crashed run from step 0 (`--start-step` needs the step of the last
checkpoint). A trainer that announces only the save it makes on stop is
relaunched from that older step after a crash, past saves it never told of.
On a slow FP32-only GPU that throws away hours that were saved on disk all
along.

Example that fires
------------------
```python
for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 200 == 0:
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
import re
from collections.abc import Iterator

from arena_ls.gates.model import TextEdit
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.announce import announces_checkpoints
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import LOOP_TYPES, CallSite, iter_statements
from arena_ls.trainer_facts.names import argument, call_name, dotted, string_value
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.periodic import is_announced, is_periodic
from arena_ls.trainer_facts.reach import Path

CODE = "AR014"
NAME = "checkpoint-announce"
MESSAGE = "checkpoints are saved but the step saved is never announced"
FIX_TITLE = "Announce each checkpoint with an @arena line"
_NOT_A_PATH = frozenset({"open", "BytesIO", "NamedTemporaryFile", "TemporaryFile"})
_STEP_NAME = lazy(r"step|^(iter_num|iteration|it|global_iter|num_updates|updates)$", re.IGNORECASE)


def check(ctx: TrainerContext) -> Iterator[Violation]:
    if ctx.training.kind != "loop":
        return
    paths = [path for _root, path in ctx.paths("save", ctx.saves.is_save)]
    if not paths:
        return
    pattern = " or a line the job's checkpoint.pattern matches" if ctx.checkpoint_patterns else ""
    kit_announces = ctx.kit.sites("save", "checkpoint")
    if not kit_announces and not announces_checkpoints(ctx.facts, ctx.checkpoint_patterns, ctx.source.text):
        message = (
            f"{MESSAGE}: print an @arena checkpoint line after the save{pattern}, "
            "or the run cannot be resumed from it"
        )
        yield Violation(span=ctx.span(paths[0].first.node), message=message, edits=_fix(ctx, paths))
        return
    silent = [
        path
        for path in paths
        if is_periodic(path)
        and not _kit_announced(path, kit_announces)
        and not is_announced(path, ctx.facts, ctx.graph, ctx.checkpoint_patterns)
    ]
    if silent:
        message = (
            f"{MESSAGE}: this save, which the loop makes on its way, is silent (only a save on stop "
            f"or at the end is announced); print an @arena checkpoint line after it{pattern}, "
            "or a crash is relaunched from an older step, or from step 0, over it"
        )
        yield Violation(span=ctx.span(silent[0].first.node), message=message, edits=_fix(ctx, silent))


def _kit_announced(path: Path, kit_sites: list[CallSite]) -> bool:
    """The save is the kit's ``save`` (it announces), or the kit's ``checkpoint`` is called beside it."""
    if any(site is path.target for site in kit_sites):
        return True
    scopes = {id(site.scope) for site in path.sites}
    return any(id(site.scope) in scopes for site in kit_sites)


# the quick fix -------------------------------------------------------------------


def _fix(ctx: TrainerContext, paths: list[Path]) -> tuple[TextEdit, ...]:
    edits: list[TextEdit] = []
    seen: set[int] = set()
    for path in paths:
        site = path.target
        if id(site.node) in seen:
            continue
        seen.add(id(site.node))
        edit = _announce_after(ctx, site)
        if edit is None:
            return ()
        edits.append(edit)
    if not edits:
        return ()
    if not _binds_json(ctx.tree):
        edits.insert(0, _import_json(ctx))
    return tuple(edits)


def _binds_json(tree: ast.Module) -> bool:
    """``import json`` at the top level (``from json import dumps`` binds no ``json``)."""
    return any(
        isinstance(stmt, ast.Import)
        and any(alias.name == "json" and alias.asname in (None, "json") for alias in stmt.names)
        for stmt in tree.body
    )


def _announce_after(ctx: TrainerContext, site: CallSite) -> TextEdit | None:
    stmt = _statement_of(site)
    if stmt is None:
        return None
    source = ctx.source
    line = stmt.lineno - 1
    indent = source.indentation(stmt)
    if len(indent) != source.char_col(line, stmt.col_offset):
        return None  # ``if x: torch.save(...)`` on one line: no safe place for a new line
    end = (stmt.end_lineno or stmt.lineno) - 1
    if end != line and not source.line(end).strip():
        return None
    step = _step_expression(ctx, site)
    if step is None:
        return None
    saved_to = _path_expression(site)
    moved = _move_after(site, stmt)
    if moved is not None:  # an atomic save: announce once the file is in place
        end = (moved.end_lineno or moved.lineno) - 1
    code = (
        f'{indent}print("@arena " + json.dumps({{"event": "checkpoint", '
        f'"step": int({step}), "path": str({saved_to})}}), flush=True)'
    )
    last = end + 1 >= len(source.lines)
    if last:
        col = len(source.line(end))
        return TextEdit(end, col, end, col, source.newline + code)
    return TextEdit(end + 1, 0, end + 1, 0, code + source.newline)


def _statement_of(site: CallSite) -> ast.stmt | None:
    """The simple statement that holds the call."""
    if site.chain:
        node, field = site.chain[-1]
        block = getattr(node, field, None)
    else:
        block = getattr(site.scope.node, "body", None)
    if not isinstance(block, list):
        return None
    call = site.node
    for stmt in block:
        if (
            isinstance(stmt, ast.stmt)
            and not isinstance(stmt, (*LOOP_TYPES, ast.If, ast.With, ast.Try))
            and (stmt.lineno <= call.lineno <= (stmt.end_lineno or stmt.lineno))
        ):
            return stmt
    return None


def _step_expression(ctx: TrainerContext, site: CallSite) -> str | None:
    """The step the save holds: its ``"step"`` entry, a step parameter, or the loop counter.

    None when none of them is visible where the save is: the quick fix is then
    left out rather than inserting a name that does not exist there.
    """
    saved = argument(site.node, 0, "obj")
    found = _step_in_dict(saved, site)
    if found is not None:
        return found
    params = site.scope.params() if site.scope.kind == "function" else {}
    for name in params:
        if _STEP_NAME.search(name):
            return name
    loop = ctx.training.loop
    if loop is not None and (loop.scope is site.scope or loop.scope.kind == "module"):
        counter = _loop_counter(loop.node)
        if counter is not None and _STEP_NAME.search(counter):
            return counter
    return None


def _step_in_dict(saved: ast.expr | None, site: CallSite) -> str | None:
    if isinstance(saved, ast.Name):
        assignments = [
            item for item in site.scope.assigns.get(saved.id, []) if item.stmt.lineno <= site.node.lineno
        ]
        saved = assignments[-1].value if assignments else None
    if isinstance(saved, ast.Call) and isinstance(saved.func, ast.Name) and (saved.func.id == "dict"):
        for item in saved.keywords:
            if item.arg and _STEP_NAME.search(item.arg):
                return ast.unparse(item.value)
    if not isinstance(saved, ast.Dict):
        return None
    for key, value in zip(saved.keys, saved.values, strict=False):
        name = string_value(key)
        if name is not None and _STEP_NAME.search(name):
            return ast.unparse(value)
    return None


def _loop_counter(loop: ast.stmt) -> str | None:
    """``for step, batch in enumerate(...)``'s ``step``, or a ``counter += 1`` in a loop."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        target = loop.target
        if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[0], ast.Name):
            return target.elts[0].id
        if isinstance(target, ast.Name) and _STEP_NAME.search(target.id):
            return target.id
    for stmt in iter_statements(loop.body):  # type: ignore[attr-defined]
        if (
            isinstance(stmt, ast.AugAssign)
            and isinstance(stmt.op, ast.Add)
            and isinstance(stmt.target, ast.Name)
        ):
            return stmt.target.id
    return None


def _path_expression(site: CallSite) -> str:
    node = site.node
    if site.name == "save_state":
        target = argument(node, 0, "output_dir")
    elif site.name in ("save_checkpoint",):
        target = argument(node, 0, "filepath")
    elif (
        site.name == "save"
        and isinstance(node.func, ast.Attribute)
        and ast.unparse(node.func.value).endswith("fabric")
    ):
        target = argument(node, 0, "path")
    else:
        target = argument(node, 1, "f") or argument(node, 1, "filename")
    if target is None or any(
        isinstance(node, ast.Call) and call_name(node) in _NOT_A_PATH for node in ast.walk(target)
    ):
        return '""'  # an open file or a buffer: evaluating it again would do something
    final = replaced_into(site, target)
    return ast.unparse(final if final is not None else target)


def _move_after(site: CallSite, stmt: ast.stmt) -> ast.stmt | None:
    """The ``os.replace(tmp, final)`` statement that follows the save in its block, if any."""
    target = _save_target(site)
    if target is None or replaced_into(site, target) is None:
        return None
    if site.chain:
        node, field = site.chain[-1]
        block = getattr(node, field, None)
    else:
        block = getattr(site.scope.node, "body", None)
    if not isinstance(block, list) or stmt not in block:
        return None
    following = block[block.index(stmt) + 1 :]
    if following and isinstance(following[0], ast.Expr) and isinstance(following[0].value, ast.Call):
        call = following[0].value
        if replaced_into(site, target) is (call.args[1] if len(call.args) == 2 else None):
            return following[0]
    return None


def _save_target(site: CallSite) -> ast.expr | None:
    return argument(site.node, 1, "f") or argument(site.node, 1, "filename")


def replaced_into(site: CallSite, target: ast.expr) -> ast.expr | None:
    """Where an atomic save puts ``target`` after it (``os.replace(target, FINAL)``, ``os.rename``,
    ``shutil.move``): the path to announce is the final one, not the temporary file (AR015)."""
    written = ast.unparse(target)
    for node in ast.walk(site.scope.node):
        if (
            isinstance(node, ast.Call)
            and node.lineno >= site.node.lineno
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("replace", "rename", "move")
            and dotted(node.func.value) in ("os", "shutil")
            and len(node.args) == 2
            and ast.unparse(node.args[0]) == written
        ):
            return node.args[1]
    return None


def _import_json(ctx: TrainerContext) -> TextEdit:
    """``import json`` before the first import (after ``from __future__`` and the docstring)."""
    body = ctx.tree.body
    line = 0
    for stmt in body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            line = stmt.end_lineno or stmt.lineno
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            line = stmt.lineno - 1
            break
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and (stmt is body[0]):
            line = stmt.end_lineno or stmt.lineno
            continue
        break
    newline = ctx.source.newline
    if line >= len(ctx.source.lines):
        end = len(ctx.source.lines) - 1
        col = len(ctx.source.line(end))
        return TextEdit(end, col, end, col, newline + "import json")
    return TextEdit(line, 0, line, 0, "import json" + newline)


RULE = declare(__doc__, CODE, NAME, MESSAGE, "error", check, fix_title=FIX_TITLE)
