"""The trainer's command-line options, for ``--resume`` and ``--start-step``.

Options come from argparse (``add_argument``), click/typer (``option``,
``Option``), and dataclass-based parsers (``HfArgumentParser``, ``tyro``,
``simple_parsing``, ``jsonargparse``, ``pyrallis``/``draccus``, ``fire``)
whose field or parameter names become options. Hugging Face's
``TrainingArguments`` brings ``--resume_from_checkpoint``.
"""

from __future__ import annotations

import ast
import dataclasses

from arena_ls.diagnostics import Span
from arena_ls.gates.model import TextEdit
from arena_ls.gates.rules.base import Violation
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.facts import CallSite, ModuleFacts, iter_statements
from arena_ls.trainer_facts.names import dotted, keyword, receiver, string_value
from arena_ls.trainer_facts.source import comment_start

_OPTION_CALLS = frozenset({"add_argument", "option", "Option", "add_option"})
_DATACLASS_PARSERS = frozenset({"HfArgumentParser", "cli", "parse", "CLI", "wrap", "Fire", "ArgumentParser"})
_DATACLASS_PACKAGES = frozenset(
    {"transformers", "tyro", "simple_parsing", "jsonargparse", "pyrallis", "draccus", "fire"}
)
START_STEP_NAMES = frozenset({"start_step", "resume_step"})


@dataclasses.dataclass(frozen=True, slots=True)
class Insertion:
    """Where a new ``add_argument`` line goes, and how it is spelled."""

    line: int
    col: int
    indent: str
    parser: str
    leading_newline: bool
    newline: str

    def edit(self, arguments: str) -> TextEdit:
        text = f"{self.indent}{self.parser}.add_argument({arguments})"
        text = f"{self.newline}{text}" if self.leading_newline else f"{text}{self.newline}"
        return TextEdit(self.line, self.col, self.line, self.col, text)


_TRAINING_ARGUMENTS = (
    "TrainingArguments",
    "SFTConfig",
    "DPOConfig",
    "GRPOConfig",
    "RewardConfig",
    "ORPOConfig",
    "KTOConfig",
    "PPOConfig",
)


def _parses_training_arguments(site: CallSite, facts: ModuleFacts) -> bool:
    """``HfArgumentParser(TrainingArguments)`` / ``TrlParser((..., SFTConfig))``, or a tuple of them
    built elsewhere in a file that imports such a class: the command line has ``--resume_from_checkpoint``."""
    if any(name in ast.unparse(site.node) for name in _TRAINING_ARGUMENTS):
        return True
    return any(local.endswith(_TRAINING_ARGUMENTS) for local in facts.imported_names)


class CliOptions:
    def __init__(self, ctx: TrainerContext) -> None:
        self.ctx = ctx
        self.flags: set[str] = set()
        self.names: set[str] = set()
        self._collect()

    def _collect(self) -> None:
        facts = self.ctx.facts
        for site in facts.calls:
            if site.name in _OPTION_CALLS:
                for arg in site.node.args:
                    text = string_value(arg)
                    if text is not None and text.startswith("-"):
                        self.flags.add(text)
            elif site.name in ("HfArgumentParser", "TrlParser") and _parses_training_arguments(site, facts):
                self.flags.add("--resume_from_checkpoint")
        if facts.imports & _DATACLASS_PACKAGES and any(
            site.name in _DATACLASS_PARSERS for site in facts.calls
        ):
            for info in facts.classes.values():
                self.names.update(info.attributes)
            for site in facts.calls_named("Fire"):
                for arg in site.node.args:
                    function = self.ctx.graph.function_for(arg, site.scope)
                    if function is not None:
                        self.names.update(function.params())
        self.names.update(flag.lstrip("-").replace("-", "_") for flag in self.flags)

    def has_resume(self) -> bool:
        return any(name.startswith("resume") and name not in START_STEP_NAMES for name in self.names)

    def has_start_step(self) -> bool:
        return bool(self.names & START_STEP_NAMES)

    def start_step_declaration(self) -> tuple[ast.Call, str] | None:
        """The ``add_argument("--start-step", ...)`` call (argparse only) and its ``dest``."""
        for site in self.ctx.facts.calls_named("add_argument", "add_option"):
            flags = [string_value(arg) for arg in site.node.args]
            names = {flag.lstrip("-").replace("-", "_") for flag in flags if flag}
            if names & START_STEP_NAMES:
                dest = string_value(keyword(site.node, "dest"))
                return site.node, dest or next(iter(sorted(names & START_STEP_NAMES)))
        return None

    def anchor(self) -> Span:
        """The main parser's constructor, else the first option, else line 1.

        The main parser is the one with the most options: a small pre-parser
        that only reads ``--config`` ahead of it is not where options go.
        """
        main = self._main_parser()
        if main is not None:
            return self.ctx.span(main)
        for name in ("ArgumentParser", "HfArgumentParser", "add_argument"):
            sites = self.ctx.facts.calls_named(name)
            if sites:
                first = min(sites, key=lambda site: (site.node.lineno, site.node.col_offset))
                return self.ctx.span(first.node)
        return self.ctx.source.line_span(0)

    def _main_parser(self) -> ast.Call | None:
        constructors: dict[str, ast.Call] = {}
        for scope in self.ctx.facts.scopes:
            for name, assignments in scope.assigns.items():
                for assignment in assignments:
                    value = assignment.value
                    if isinstance(value, ast.Call) and dotted(value.func).split(".")[-1] in (
                        "ArgumentParser",
                        "HfArgumentParser",
                    ):
                        constructors.setdefault(name, value)
        if len(constructors) < 2:
            return None
        counts = {name: 0 for name in constructors}
        for site in self.ctx.facts.calls_named("add_argument"):
            owner = dotted(receiver(site.node))
            if owner in counts:
                counts[owner] += 1
        best = max(counts, key=lambda name: (counts[name], -constructors[name].lineno))
        return constructors[best]

    def missing(self, message: str, arguments: str) -> Violation:
        """The finding of an option a relaunch passes that the trainer lacks (AR007, AR008).

        It sits at :meth:`anchor`; its quick fix adds ``add_argument(arguments)``
        after the last option, where there is one.
        """
        insertion = self.insertion()
        edits = (insertion.edit(arguments),) if insertion is not None else ()
        return Violation(span=self.anchor(), message=message, edits=edits)

    def insertion(self) -> Insertion | None:
        """Just after the last ``parser.add_argument(...)`` statement, at its indentation."""
        candidates = [
            site for site in self.ctx.facts.calls_named("add_argument") if receiver(site.node) is not None
        ]
        for site in sorted(candidates, key=lambda s: s.node.lineno, reverse=True):
            stmt = _statement_of(site)
            if stmt is None:
                continue
            source = self.ctx.source
            end_line = (stmt.end_lineno or stmt.lineno) - 1
            tail = source.line(end_line)[source.char_col(end_line, stmt.end_col_offset or 0) :]
            cut = comment_start(tail)
            if (tail if cut < 0 else tail[:cut]).strip():
                return None  # another statement follows on the same line
            parser = dotted(receiver(site.node))
            last = end_line + 1 >= len(source.lines)
            line = end_line if last else end_line + 1
            col = len(source.line(end_line)) if last else 0
            return Insertion(
                line=line,
                col=col,
                indent=source.indentation(stmt),
                parser=parser,
                leading_newline=last,
                newline=source.newline,
            )
        return None


def _statement_of(site: CallSite) -> ast.Expr | None:
    node = site.scope.node
    body = node.body
    for stmt in iter_statements(body):
        if isinstance(stmt, ast.Expr) and stmt.value is site.node:
            return stmt
    return None
