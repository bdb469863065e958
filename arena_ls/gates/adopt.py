"""The quick fix "Add arena-ls's callback" on a framework trainer (contract 8.1).

It imports the kit's callback (``from arena_trainer import HFCallback``, or
``LightningCallback``) after the file's last top-level import, unless the kit
is imported already, and hands it to the trainer:

- ``Trainer(..., callbacks=[a, b])`` gets it at the end of the list;
- ``Trainer(..., callbacks=some_list)`` gets ``[*(some_list or []), HFCallback()]``;
- ``Trainer(...)`` without callbacks gets ``callbacks=[HFCallback()]`` after its last argument;
- a Hugging Face trainer built out of sight (``trainer = make_trainer()``) gets
  ``trainer.add_callback(HFCallback())`` on the line before ``trainer.train(...)``;
- ``LightningCLI(Model)`` gets ``trainer_defaults={"callbacks": [LightningCallback()]}``.

Where none of these applies (a ``LightningCLI`` that already has
``trainer_defaults``), there is no fix: the finding says what to do.
"""

from __future__ import annotations

import ast

from arena_ls.gates.model import TextEdit
from arena_ls.gates.options import CliOptions
from arena_ls.gates.rules.base import Violation
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.kit import KIT_MODULE
from arena_ls.trainer_facts.loop import Framework
from arena_ls.trainer_facts.names import argument, call_name, keyword, receiver

FIX_TITLE = "Add arena-ls's callback"


def callback_name(framework: Framework) -> str:
    return "LightningCallback" if framework.kind == "lightning" else "HFCallback"


def callback_fix(ctx: TrainerContext) -> tuple[TextEdit, ...]:
    """The edits that pass the kit's callback to the framework trainer; () when none applies."""
    framework = ctx.training.framework
    if framework is None or ctx.kit.callback() is not None:
        return ()
    name = callback_name(framework)
    reference, imports = _reference(ctx, name)
    handed = _hand_over(ctx, framework, f"{reference}()")
    if handed is None:
        return ()
    return (*imports, handed)


def _reference(ctx: TrainerContext, name: str) -> tuple[str, tuple[TextEdit, ...]]:
    """How the file names the callback, and the import that makes the name exist (if needed)."""
    for local, qualified in ctx.facts.imported_names.items():
        if qualified == f"{KIT_MODULE}.{name}":
            return local, ()
        if qualified == KIT_MODULE:
            return f"{local}.{name}", ()
    if any(
        isinstance(stmt, ast.Import)
        and any(alias.name == KIT_MODULE and not alias.asname for alias in stmt.names)
        for stmt in ctx.tree.body
    ):
        return f"{KIT_MODULE}.{name}", ()
    return name, (_import_edit(ctx, f"from {KIT_MODULE} import {name}"),)


def _import_edit(ctx: TrainerContext, statement: str) -> TextEdit:
    """A line after the last top-level import (else after the module docstring, else at the top)."""
    body = ctx.tree.body
    anchor: ast.stmt | None = None
    for stmt in body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            anchor = stmt
    if anchor is None and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        anchor = body[0]
    newline = ctx.source.newline
    if anchor is None:
        return TextEdit(0, 0, 0, 0, statement + newline)
    end = (anchor.end_lineno or anchor.lineno) - 1
    if end + 1 >= len(ctx.source.lines):
        col = len(ctx.source.line(end))
        return TextEdit(end, col, end, col, newline + statement)
    return TextEdit(end + 1, 0, end + 1, 0, statement + newline)


def _hand_over(ctx: TrainerContext, framework: Framework, instance: str) -> TextEdit | None:
    call = framework.trainer_call
    if framework.cli:
        return _lightning_cli(ctx, framework.call.node, instance)
    if call is not None:
        return _into_constructor(ctx, call, instance)
    if framework.kind == "hf":
        return _add_callback_before(ctx, framework, instance)
    cli = next((site for site in ctx.facts.calls if site.name.endswith("LightningCLI")), None)
    return _lightning_cli(ctx, cli.node, instance) if cli is not None else None  # LightningCLI(run=False)


def _into_constructor(ctx: TrainerContext, call: ast.Call, instance: str) -> TextEdit:
    given = keyword(call, "callbacks")
    if isinstance(given, ast.List):
        if given.elts:
            return _after_last(ctx, given.elts[-1], given, instance)
        span = ctx.span(given)
        return TextEdit(span.line, span.col, span.end_line, span.end_col, f"[{instance}]")
    if given is not None:
        span = ctx.span(given)
        written = ast.get_source_segment(ctx.source.parse_text, given) or ast.unparse(given)
        text = f"[*({written} or []), {instance}]"
        return TextEdit(span.line, span.col, span.end_line, span.end_col, text)
    return _add_keyword(ctx, call, f"callbacks=[{instance}]")


def _lightning_cli(ctx: TrainerContext, call: ast.Call, instance: str) -> TextEdit | None:
    defaults = keyword(call, "trainer_defaults")
    if defaults is None:
        return _add_keyword(ctx, call, f'trainer_defaults={{"callbacks": [{instance}]}}')
    if not isinstance(defaults, ast.Dict):
        return None
    for key, value in zip(defaults.keys, defaults.values, strict=False):
        if isinstance(key, ast.Constant) and key.value == "callbacks":
            if isinstance(value, ast.List) and value.elts:
                return _after_last(ctx, value.elts[-1], value, instance)
            if isinstance(value, ast.Call):  # one callback, not a list
                span = ctx.span(value)
                written = ast.get_source_segment(ctx.source.parse_text, value) or ast.unparse(value)
                return TextEdit(span.line, span.col, span.end_line, span.end_col, f"[{written}, {instance}]")
            return None
    if not defaults.values:
        span = ctx.span(defaults)
        return TextEdit(span.line, span.col, span.end_line, span.end_col, f'{{"callbacks": [{instance}]}}')
    return _after_last(ctx, defaults.values[-1], defaults, f'"callbacks": [{instance}]')


def _add_keyword(ctx: TrainerContext, call: ast.Call, text: str) -> TextEdit:
    """``text`` as the call's last argument: after the last one given, else inside ``()``."""
    arguments: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    if arguments:
        last = max(arguments, key=lambda node: (node.end_lineno or 0, node.end_col_offset or 0))
        return _after_last(ctx, last, call, text)
    span = ctx.span(call)
    return TextEdit(span.end_line, span.end_col - 1, span.end_line, span.end_col - 1, text)


def _after_last(ctx: TrainerContext, last: ast.AST, container: ast.AST, text: str) -> TextEdit:
    """``text`` as a new item after ``last``: on a line of its own where the items are one a line."""
    span = ctx.span(last)
    line = ctx.source.line(span.end_line)
    rest = line[span.end_col :].strip()
    closes_later = ctx.span(container).end_line > span.end_line
    if closes_later and rest in ("", ","):
        first = ctx.source.line(ctx.span(last).line)
        indent = first[: len(first) - len(first.lstrip())]
        newline = ctx.source.newline
        if rest == ",":
            return TextEdit(span.end_line, len(line), span.end_line, len(line), f"{newline}{indent}{text},")
        return TextEdit(span.end_line, span.end_col, span.end_line, span.end_col, f",{newline}{indent}{text}")
    return _insert_after(ctx, last, f", {text}")


def _insert_after(ctx: TrainerContext, node: ast.AST, text: str) -> TextEdit:
    span = ctx.span(node)
    return TextEdit(span.end_line, span.end_col, span.end_line, span.end_col, text)


def _add_callback_before(ctx: TrainerContext, framework: Framework, instance: str) -> TextEdit | None:
    """``trainer.add_callback(HFCallback())`` on its own line before ``trainer.train(...)``."""
    site = framework.call
    owner = receiver(site.node)
    if owner is None:
        return None
    statement = next(
        (stmt for stmt in _statements(site.scope.node) if _contains(stmt, site.node)),
        None,
    )
    if statement is None:
        return None
    line = statement.lineno - 1
    indent = ctx.source.indentation(statement)
    owner_text = ast.get_source_segment(ctx.source.parse_text, owner) or ast.unparse(owner)
    return TextEdit(line, 0, line, 0, f"{indent}{owner_text}.add_callback({instance}){ctx.source.newline}")


def _statements(scope: ast.AST) -> list[ast.stmt]:
    found: list[ast.stmt] = []
    for node in ast.walk(scope):
        if isinstance(node, ast.stmt) and node is not scope:
            found.append(node)
    return found


def _contains(stmt: ast.stmt, call: ast.Call) -> bool:
    """The simple statement the call is part of (not a compound statement around it)."""
    if hasattr(stmt, "body"):
        return False  # a compound statement: the call is in one of its own statements
    return any(node is call for node in ast.walk(stmt))


def framework_violation(ctx: TrainerContext, message: str) -> Violation:
    """A loop-level finding of a framework trainer, at the framework call, with the callback fix."""
    edits = callback_fix(ctx)
    return Violation(
        span=ctx.training.anchor, message=message, edits=edits, fix_title=FIX_TITLE if edits else None
    )


RESUME_FIX_TITLE = "Resume from --resume_from_checkpoint"
CKPT_PATH_FIX_TITLE = "Resume from --ckpt_path"


def framework_resume_violation(ctx: TrainerContext, rule_message: str) -> Violation:
    """AR007/AR008 on a framework trainer whose ``train()`` / ``fit()`` does not resume from an option.

    A Hugging Face trainer whose command line has ``--resume_from_checkpoint``
    (``HfArgumentParser``/``TrlParser`` of its training arguments) gets the fix
    ``trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint)``:
    ``Trainer.train()`` ignores that option unless it is handed over.
    """
    framework = ctx.training.framework
    assert framework is not None
    if framework.kind == "lightning":
        what = (
            "trainer.fit(...) is given no ckpt_path from the command line (add an option such as --ckpt_path)"
        )
    else:
        what = (
            "trainer.train() is given no resume_from_checkpoint from the command line "
            "(Trainer.train() ignores --resume_from_checkpoint unless it is handed over)"
        )
    message = f"{rule_message}: {what}; a relaunch would start again from step 0"
    edits = _resume_fix(ctx)
    title = CKPT_PATH_FIX_TITLE if framework.kind == "lightning" else RESUME_FIX_TITLE
    return Violation(
        span=ctx.training.anchor, message=message, edits=edits, fix_title=title if edits else None
    )


def _resume_fix(ctx: TrainerContext) -> tuple[TextEdit, ...]:
    framework = ctx.training.framework
    if framework is None or framework.cli:
        return ()
    if framework.kind == "lightning":
        return _ckpt_path_fix(ctx, framework)

    if "resume_from_checkpoint" not in CliOptions(ctx).names:
        return ()
    call = framework.call.node
    owner = receiver(call)
    if owner is None:
        return ()
    owner_text = ast.get_source_segment(ctx.source.parse_text, owner) or ast.unparse(owner)
    value = f"{owner_text}.args.resume_from_checkpoint"
    given = keyword(call, "resume_from_checkpoint")
    if given is not None:
        span = ctx.span(given)
        return (TextEdit(span.line, span.col, span.end_line, span.end_col, value),)
    if call.args:
        return ()  # a positional resume argument that is a constant: leave it to the person
    return (_add_keyword(ctx, call, f"resume_from_checkpoint={value}"),)


def _ckpt_path_fix(ctx: TrainerContext, framework: Framework) -> tuple[TextEdit, ...]:
    """``--ckpt_path`` after the last ``add_argument``, and ``fit(..., ckpt_path=args.ckpt_path)``.

    Only where the parsed namespace (``args = parser.parse_args()``) is seen by
    the ``fit`` call: assigned in its function, a parameter of it of that name
    (``def main(args)``), or a module-level name.
    """
    options = CliOptions(ctx)
    if "ckpt_path" in options.names:
        return ()  # the option exists but is not handed to fit(): which name holds it is not known here
    insertion = options.insertion()
    namespace = _namespace(ctx)
    call = framework.call.node
    if insertion is None or namespace is None or not _visible(ctx, namespace, framework):
        return ()
    option = insertion.edit('"--ckpt_path", default=None, help="a checkpoint to resume from"')
    value = f"{namespace}.ckpt_path"
    given = argument(call, 4, "ckpt_path")
    if given is not None:
        if not isinstance(given, ast.Constant):
            return ()
        span = ctx.span(given)
        return (option, TextEdit(span.line, span.col, span.end_line, span.end_col, value))
    return (option, _add_keyword(ctx, call, f"ckpt_path={value}"))


def _namespace(ctx: TrainerContext) -> str | None:
    """The name ``parser.parse_args()`` is assigned to."""
    for scope in ctx.facts.scopes:
        for name, assignments in scope.assigns.items():
            if any(
                isinstance(item.value, ast.Call)
                and call_name(item.value) in ("parse_args", "parse_known_args")
                for item in assignments
            ):
                return name
    return None


def _visible(ctx: TrainerContext, name: str, framework: Framework) -> bool:
    scope = framework.call.scope
    if name in scope.assigns or name in scope.params():
        return True
    return name in ctx.facts.module.assigns
