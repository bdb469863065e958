"""AR015 checkpoint-atomic: a checkpoint is saved straight to its final path, where a kill tears it.

What it checks
--------------
That every checkpoint save the training loop makes (directly or in a helper it
calls) writes a temporary file first and then moves it over the final path with
`os.replace` (or `os.rename`, `shutil.move`, `Path.replace`), so that the final
path only ever holds a whole checkpoint. A save to a new file each time
(`f"ckpt-{step}.pt"`, a name holding the step or the epoch) passes: a kill
tears only the newest file, and the one before it stays whole for a resume to
fall back to. It fires at a `torch.save` (or
Lightning Fabric's `fabric.save`, safetensors' `save_file`), a
`save_pretrained` or an `open(..., "wb")` of a checkpoint file whose target is
never moved into place after it in the same function. A save through the
trainer kit (`arena_trainer.save`) is atomic and passes. Its quick fix saves to
`<path>.tmp` and adds the `os.replace` after the save (and `import os` where
needed); in a file that imports the trainer kit it calls `arena_trainer.save`
instead, which also announces the checkpoint with its size and SHA-256.

Why it matters on a 6 GB FP32-only laptop GPU
----------------------------------------------
A save takes seconds on a laptop disk, and the laptop is where runs get killed
in the middle of one: the OOM killer, a sleep, a power cut, a Windows update. A
trainer that overwrites its one checkpoint in place (nanoGPT, pytorch/examples
and most public trainers do) is left with a torn file where its only
checkpoint was: every resume then fails on it (Lightning #688, #19970), and
the hours it held are gone. arena-ls verifies a checkpoint before it resumes
from it and never resumes from a torn one, but it cannot bring the lost one
back; `os.replace` is atomic, so with it a kill leaves the previous checkpoint
whole.

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
        print("@arena " + json.dumps({"event": "checkpoint", "step": step,
                                      "path": "ckpt.pt"}), flush=True)
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
from arena_ls.gates.rules.ar014_checkpoint_announce import _step_expression
from arena_ls.gates.rules.base import Violation, declare
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import LOOP_TYPES, CallSite
from arena_ls.trainer_facts.names import argument, call_name, dotted, last_identifier, string_value
from arena_ls.trainer_facts.patterns import lazy

CODE = "AR015"
NAME = "checkpoint-atomic"
MESSAGE = "a checkpoint is saved straight to its final path: a kill during the save tears it"
FIX_TITLE = "Save atomically: a temporary file, then os.replace (or the trainer kit's save)"
_MOVES = frozenset({"replace", "rename", "move", "renames"})
_CHECKPOINT_FILE = lazy(r"ckpt|checkpoint|\.(pt|pth|bin|pkl|ckpt|safetensors)\b", re.IGNORECASE)
_TEMPORARY = lazy(r"tmp|temp|partial|part\b|incomplete", re.IGNORECASE)
_PER_SAVE_NAME = lazy(r"step|epoch|^(iter_num|iteration|it|global_iter|num_updates|updates)$", re.IGNORECASE)
_KIT = "arena_trainer"
_SIMPLE = (ast.Name, ast.Attribute, ast.Constant, ast.JoinedStr, ast.FormattedValue, ast.BinOp, ast.Subscript)


def check(ctx: TrainerContext) -> Iterator[Violation]:
    if ctx.training.kind != "loop":
        return
    seen: set[int] = set()
    for _root, path in ctx.paths("atomic-save", _writes_a_checkpoint):
        site = path.target
        target = _target(site)
        if target is None or id(target) in seen:
            continue  # a buffer; or the file ``with open(...)`` gave a save, judged once
        seen.add(id(target))
        if _new_file_each_time(target) or _moved_into_place(site, target):
            continue
        where = ast.unparse(target)
        message = (
            f"{MESSAGE}: `{_short(where)}` is written in place, with no temporary file and os.replace, "
            "so a kill mid-save leaves no whole checkpoint to resume from"
        )
        yield Violation(span=ctx.span(site.node), message=message, edits=_fix(ctx, site, target))


def _writes_a_checkpoint(site: CallSite) -> bool:
    """``torch.save`` / ``fabric.save`` / ``save_file`` to a path, ``save_pretrained``, and
    ``open(<a checkpoint file>, "wb")``."""
    name, func = site.name, site.node.func
    if name == "save":
        return isinstance(func, ast.Attribute) and (
            dotted(func.value) in ("torch", "th") or last_identifier(func.value) == "fabric"
        )
    if name in ("save_file", "save_pretrained"):
        return True
    if name == "open" and isinstance(func, ast.Name):
        mode = string_value(argument(site.node, 1, "mode"))
        where = argument(site.node, 0, "file")
        return bool(mode and "w" in mode and "b" in mode and where is not None and _names_a_checkpoint(where))
    return False


def _names_a_checkpoint(node: ast.expr) -> bool:
    return _CHECKPOINT_FILE.search(ast.unparse(node)) is not None


def _target(site: CallSite) -> ast.expr | None:
    """The path the save writes to; None when it writes to an open file or a buffer (the open is
    judged on its own)."""
    node = site.node
    if site.name == "save_pretrained":
        target = argument(node, 0, "save_directory")
    elif site.name == "open":
        target = argument(node, 0, "file")
    elif site.name == "save" and last_identifier(node.func) == "save" and _is_fabric(node):
        target = argument(node, 0, "path")
    else:
        target = argument(node, 1, "f") or argument(node, 1, "filename")
    if isinstance(target, ast.Name):
        opened = _opened_as(site, target.id)
        if opened is not None:
            return opened if isinstance(opened, ast.expr) else None
    if target is None or any(_opens(n) for n in ast.walk(target)):
        return None
    return target


def _opened_as(site: CallSite, name: str) -> ast.expr | bool | None:
    """The path of ``with open(PATH, ...) as name`` around the save (True: ``name`` is another
    file-like object a ``with`` made, a buffer); None: ``name`` is not bound by a ``with``."""
    for node in ast.walk(site.scope.node):
        if not isinstance(node, (ast.With, ast.AsyncWith)):
            continue
        for item in node.items:
            bound = item.optional_vars
            if isinstance(bound, ast.Name) and bound.id == name:
                opener = item.context_expr
                if isinstance(opener, ast.Call) and call_name(opener) == "open":
                    return argument(opener, 0, "file")
                return True
    return None


def _opens(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and call_name(node) in ("open", "BytesIO")


def _is_fabric(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and last_identifier(node.func.value) == "fabric"


def _new_file_each_time(target: ast.expr) -> bool:
    """``f"ckpt-{step}.pt"``, ``"ckpt_%d.pt" % epoch``: each save writes a new file, and a kill
    tears only that one; the checkpoint before it stays whole for a resume to fall back to."""
    for node in ast.walk(target):
        name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
        if isinstance(name, str) and _PER_SAVE_NAME.search(name):
            return True
    return False


def _moved_into_place(site: CallSite, target: ast.expr) -> bool:
    """A move of ``target`` after the save, in the same function: ``os.replace(target, final)``,
    ``shutil.move``, ``os.rename``, ``target.replace(final)``; or a temporary-named target that
    something in the function moves."""
    written = ast.unparse(target)
    temporary = _TEMPORARY.search(written) is not None
    for node in ast.walk(site.scope.node):
        if not isinstance(node, ast.Call) or node.lineno < site.node.lineno:
            continue
        moved = _moved_from(node)
        if moved is not None and (moved == written or temporary):
            return True
    return False


def _moved_from(call: ast.Call) -> str | None:
    """What a move call moves: ``os.replace(SRC, dst)`` and kin, or ``SRC.replace(dst)``."""
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _MOVES:
        return None
    owner = dotted(func.value)
    if owner in ("os", "shutil") and call.args:
        return ast.unparse(call.args[0])
    if owner not in ("os", "shutil") and len(call.args) == 1 and not call.keywords:
        return ast.unparse(func.value)  # Path(tmp).replace(final)
    return None


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


# the quick fix -------------------------------------------------------------------


def _fix(ctx: TrainerContext, site: CallSite, target: ast.expr) -> tuple[TextEdit, ...]:
    stmt = _simple_statement(site)
    plain = (*_SIMPLE, ast.expr_context, ast.operator)
    if stmt is None or not all(isinstance(n, plain) for n in ast.walk(target)):
        return ()  # a call in the path would run twice: no fix
    if site.name == "save" and _KIT in ctx.facts.imports and not _is_fabric(site.node):
        kit = _kit_fix(ctx, site, stmt)
        if kit:
            return kit
    source = ctx.source
    written = _text(ctx, target)
    literal = target.value if isinstance(target, ast.Constant) and isinstance(target.value, str) else None
    temporary = _quoted(f"{literal}.tmp") if literal is not None else f'str({written}) + ".tmp"'
    start, end = _columns(ctx, target)
    edits = [TextEdit(target.lineno - 1, start, (target.end_lineno or target.lineno) - 1, end, temporary)]
    last = (stmt.end_lineno or stmt.lineno) - 1
    indent = source.indentation(stmt)
    move = f"{indent}os.replace({temporary}, {written})"
    if last + 1 >= len(source.lines):
        col = len(source.line(last))
        edits.append(TextEdit(last, col, last, col, source.newline + move))
    else:
        edits.append(TextEdit(last + 1, 0, last + 1, 0, move + source.newline))
    if not _binds_os(ctx.tree):
        edits.insert(0, _import_os(ctx))
    return tuple(edits)


def _kit_fix(ctx: TrainerContext, site: CallSite, stmt: ast.stmt) -> tuple[TextEdit, ...]:
    """``arena_trainer.save(obj, path, step)`` in place of the ``torch.save`` statement."""
    saved = argument(site.node, 0, "obj")
    target = _target(site)
    step = _step_expression(ctx, site)
    if saved is None or target is None or step is None or not _binds_kit(ctx.tree):
        return ()
    source = ctx.source
    line = stmt.lineno - 1
    end = (stmt.end_lineno or stmt.lineno) - 1
    text = f"{_KIT}.save({_text(ctx, saved)}, {_text(ctx, target)}, {step})"
    first = source.char_col(line, stmt.col_offset)
    last = source.char_col(end, stmt.end_col_offset or 0)
    return (TextEdit(line, first, end, last, text),)


def _text(ctx: TrainerContext, node: ast.expr) -> str:
    """The expression as written in the file (its quotes kept), else as Python would write it."""
    return ast.get_source_segment(ctx.source.text, node) or ast.unparse(node)


def _quoted(text: str) -> str:
    return f'"{text}"' if '"' not in text and "\\" not in text else repr(text)


def _columns(ctx: TrainerContext, node: ast.expr) -> tuple[int, int]:
    source = ctx.source
    start = source.char_col(node.lineno - 1, node.col_offset)
    end = source.char_col((node.end_lineno or node.lineno) - 1, node.end_col_offset or 0)
    return start, end


def _simple_statement(site: CallSite) -> ast.stmt | None:
    """The simple statement that is the save, alone on its lines (``torch.save(...)``)."""
    if site.chain:
        node, field = site.chain[-1]
        block = getattr(node, field, None)
    else:
        block = getattr(site.scope.node, "body", None)
    if not isinstance(block, list):
        return None
    for stmt in block:
        if (
            isinstance(stmt, ast.Expr)
            and stmt.value is site.node
            and not isinstance(stmt, (*LOOP_TYPES, ast.If, ast.With, ast.Try))
        ):
            return stmt
    return None


def _binds_os(tree: ast.Module) -> bool:
    return any(
        isinstance(stmt, ast.Import) and any(a.name == "os" and a.asname in (None, "os") for a in stmt.names)
        for stmt in tree.body
    )


def _binds_kit(tree: ast.Module) -> bool:
    return any(
        isinstance(stmt, ast.Import) and any(a.name == _KIT and a.asname in (None, _KIT) for a in stmt.names)
        for stmt in tree.body
    )


def _import_os(ctx: TrainerContext) -> TextEdit:
    """``import os`` before the first import (after ``from __future__`` and the docstring)."""
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
    return TextEdit(line, 0, line, 0, "import os" + ctx.source.newline)


RULE = declare(__doc__, CODE, NAME, MESSAGE, "warning", check, fix_title=FIX_TITLE)
