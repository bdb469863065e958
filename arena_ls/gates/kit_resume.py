"""The quick fix "Resume from the trainer kit's --resume-path" on a Lightning ``fit`` (AR007, AR008).

A Lightning script that builds its trainer with ``LightningCLI(..., run=False)``
and calls ``cli.trainer.fit(...)`` itself has no ``--ckpt_path``: that CLI only
has one with its ``fit`` subcommand. A relaunch would start again from step 0,
and the fix "Resume from --ckpt_path" (an argparse option) does not apply. This
one hands ``fit`` the checkpoint the relaunch names, through the kit::

    from arena_trainer import resume_path
    ...
    ckpt_path = resume_path()
    cli = LightningCLI(MyModel, MyData, run=False)
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=ckpt_path)

``resume_path()`` reads ``--resume-path PATH`` and takes it off ``sys.argv``,
so the line goes before the first statement that reads the command line
(``LightningCLI(...)``, ``parse_args()``...); the job's ``resume.args`` are
``["--resume-path", "{path}"]`` (``arena init``, "Add this trainer to the
manifest"). It is offered only where that order can be had in the function
that calls ``fit``: every command-line parse of the file is in that function,
none in a decorated one (click, typer parse before the body runs), and the
line can go at the start of a line of its own.
"""

from __future__ import annotations

import ast

from arena_ls.gates.adopt import _add_keyword, _reference, framework_resume_violation
from arena_ls.gates.model import TextEdit
from arena_ls.gates.rules.base import Violation
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import CallSite
from arena_ls.trainer_facts.kit import KIT_MODULE
from arena_ls.trainer_facts.loop import Framework
from arena_ls.trainer_facts.names import argument

KIT_RESUME_FIX_TITLE = "Resume from the trainer kit's --resume-path"
KIT_RESUME_OPTION = "--resume-path"
_PARSES = frozenset(
    {"parse_args", "parse_known_args", "parse_args_into_dataclasses", "LightningCLI", "Fire", "CLI"}
)
_NAMES = ("ckpt_path", "resume_ckpt_path", "arena_ckpt_path")

Block = list[ast.stmt]


def resume_violation(ctx: TrainerContext, rule_message: str) -> Violation:
    """AR007/AR008 on a framework trainer: the option fix where it applies, else the kit's."""
    found = framework_resume_violation(ctx, rule_message)
    if found.edits:
        return found
    edits = kit_resume_fix(ctx)
    if not edits:
        return found
    message = (
        f"{found.message}; the fix hands fit() arena_trainer.resume_path() "
        f"(the relaunch's {KIT_RESUME_OPTION} PATH)"
    )
    return Violation(span=found.span, message=message, edits=edits, fix_title=KIT_RESUME_FIX_TITLE)


def kit_resume_fix(ctx: TrainerContext) -> tuple[TextEdit, ...]:
    """The kit's import, ``ckpt_path = resume_path()`` before the parse, ``fit(..., ckpt_path=ckpt_path)``."""
    framework = ctx.training.framework
    if framework is None or framework.kind != "lightning" or framework.cli:
        return ()
    fit = framework.call.node
    given = argument(fit, 4, "ckpt_path")
    if given is not None and not (isinstance(given, ast.Constant) and given.value is None):
        return ()  # it resumes from something already (a constant such as "last"): the person decides
    anchor = _anchor(ctx, framework)
    if anchor is None:
        return ()
    name = _free_name(framework)
    if name is None:
        return ()
    reference, imports = _reference(ctx, "resume_path")
    if imports:
        imports = _joined_import(ctx) or imports
    newline = ctx.source.newline
    line = anchor.lineno - 1
    text = f"{ctx.source.indentation(anchor)}{name} = {reference}(){newline}"
    assignment = TextEdit(line, 0, line, 0, text)
    if given is not None:
        span = ctx.span(given)
        handed = TextEdit(span.line, span.col, span.end_line, span.end_col, name)
    else:
        handed = _add_keyword(ctx, fit, f"ckpt_path={name}")
    return (*_merged(imports, assignment), handed)


def _merged(imports: tuple[TextEdit, ...], assignment: TextEdit) -> tuple[TextEdit, ...]:
    """One insertion where the import and the assignment go at the same place (import first).

    (An import joined to an existing line ends that line: never the assignment's place.)
    """
    if not imports:
        return (assignment,)
    (imported,) = imports
    if (imported.line, imported.col) == (assignment.line, assignment.col):
        return (
            TextEdit(
                imported.line,
                imported.col,
                imported.end_line,
                imported.end_col,
                imported.new_text + assignment.new_text,
            ),
        )
    return (imported, assignment)


def _joined_import(ctx: TrainerContext) -> tuple[TextEdit, ...]:
    """``, resume_path`` added to a one-line ``from arena_trainer import X`` of the module, if any."""
    for stmt in ctx.tree.body:
        if (
            isinstance(stmt, ast.ImportFrom)
            and stmt.module == KIT_MODULE
            and not stmt.level
            and stmt.end_lineno == stmt.lineno
            and all(alias.name != "*" for alias in stmt.names)
        ):
            last = ctx.span(stmt.names[-1])
            text = ctx.source.line(last.end_line)
            if text[last.end_col :].split("#")[0].strip():
                return ()  # a `)` or a `;` after the names: leave it
            return (TextEdit(last.end_line, last.end_col, last.end_line, last.end_col, ", resume_path"),)
    return ()


def _anchor(ctx: TrainerContext, framework: Framework) -> ast.stmt | None:
    """The statement the assignment goes before: the first that parses the command line, or ``fit``'s.

    None where the order cannot be had: a parse outside ``fit``'s function, a
    decorated function, a statement that does not start its line.
    """
    scope = framework.call.scope
    if isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and scope.node.decorator_list:
        return None
    body = getattr(scope.node, "body", None)
    if not isinstance(body, list):
        return None
    clis = _cli_classes(ctx)
    parses = [site for site in ctx.facts.calls if _parses(site) or site.name in clis]
    if any(site.scope is not scope for site in parses):
        return None
    paths = [_path_to(body, site.node) for site in (framework.call, *parses)]
    if any(path is None for path in paths):
        return None
    block, index = _common_block([path for path in paths if path is not None])
    anchor = block[index]
    text = ctx.source.line(anchor.lineno - 1)
    if text[: anchor.col_offset].strip():
        return None  # after a `;` or on a compound statement's line: no line of its own
    return anchor


def _parses(site: CallSite) -> bool:
    return site.name in _PARSES or site.name.endswith("LightningCLI")


def _cli_classes(ctx: TrainerContext) -> frozenset[str]:
    """Same-file subclasses of ``LightningCLI`` (``class MyCLI(LightningCLI)``): they parse too."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, info in ctx.facts.classes.items():
            if name not in found and any(
                base.endswith("LightningCLI") or base.split(".")[-1] in found for base in info.bases
            ):
                found.add(name)
                grew = True
    return frozenset(found)


def _path_to(body: Block, node: ast.AST) -> list[tuple[Block, int]] | None:
    """The blocks from ``body`` down to the statement holding ``node``, with its index in each."""
    for index, stmt in enumerate(body):
        if not any(inner is node for inner in ast.walk(stmt)):
            continue
        path = [(body, index)]
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return None  # inside a nested function or class: another scope
        for nested in _blocks(stmt):
            deeper = _path_to(nested, node)
            if deeper is not None:
                return path + deeper
        return path
    return None


def _blocks(stmt: ast.stmt) -> list[Block]:
    found: list[Block] = []
    for field in ("body", "orelse", "finalbody"):
        value = getattr(stmt, field, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            found.append(value)
    found.extend(handler.body for handler in getattr(stmt, "handlers", ()) or ())
    found.extend(case.body for case in getattr(stmt, "cases", ()) or ())
    return found


def _common_block(paths: list[list[tuple[Block, int]]]) -> tuple[Block, int]:
    """The deepest block every path goes through, and the first index in it any path takes."""
    depth = 0
    while all(len(path) > depth + 1 for path in paths) and all(
        path[depth + 1][0] is paths[0][depth + 1][0] for path in paths
    ):
        depth += 1
    block = paths[0][depth][0]
    return block, min(path[depth][1] for path in paths)


def _free_name(framework: Framework) -> str | None:
    scope = framework.call.scope
    taken = set(scope.assigns) | set(scope.params())
    return next((name for name in _NAMES if name not in taken), None)
