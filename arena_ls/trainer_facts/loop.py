"""Finding the training loop, or the framework call that hides it.

The training loop is the OUTERMOST loop that reaches ``.backward()``, directly
or through same-file functions: the loop over epochs or steps, not the
gradient-accumulation micro-step loop inside it. Loop-level findings are
reported at its header. When no loop reaches backward but the file hands its
model to a framework (Lightning's ``Trainer.fit``, Hugging Face's
``Trainer.train``), they are reported at that call instead; with neither,
at line 1.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Literal

from arena_ls.diagnostics import Span
from arena_ls.trainer_facts.facts import CallSite, LoopSite, ModuleFacts
from arena_ls.trainer_facts.names import argument, call_name, is_false, keyword, last_identifier, receiver
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.reach import CallGraph
from arena_ls.trainer_facts.sites import is_backward
from arena_ls.trainer_facts.source import SourceText

FrameworkKind = Literal["lightning", "hf"]
_LIGHTNING_PACKAGES = frozenset({"lightning", "pytorch_lightning"})
_HF_PACKAGES = frozenset({"transformers", "trl"})
_HF_ARGUMENT_CLASSES = frozenset(
    {"SFTConfig", "DPOConfig", "GRPOConfig", "RewardConfig", "ORPOConfig", "KTOConfig", "PPOConfig"}
)


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Framework:
    """A framework call that runs the training loop."""

    kind: FrameworkKind
    call: CallSite
    trainer_call: ast.Call | None
    """``Trainer(...)``: its keywords configure checkpointing and evaluation."""
    args_calls: tuple[ast.Call, ...] = ()
    """Hugging Face ``TrainingArguments(...)`` calls."""
    cli: bool = False
    """``LightningCLI(...)`` or a same-file subclass of it runs the training (``fit`` on its command line)."""

    @property
    def label(self) -> str:
        if self.kind == "lightning":
            return "Lightning's Trainer.fit"
        return "Hugging Face's Trainer.train"

    def resume_argument(self) -> ast.expr | None:
        """What the framework call resumes from, as written.

        Hugging Face ``trainer.train(resume_from_checkpoint=X)``, Lightning
        ``trainer.fit(..., ckpt_path=X)``; None for ``LightningCLI`` (its
        ``--ckpt_path`` is its own) and when the call names none.
        """
        node = self.call.node
        if self.kind == "lightning":
            return None if self.cli else argument(node, 4, "ckpt_path")
        return argument(node, 0, "resume_from_checkpoint")

    def setting(self, name: str) -> ast.expr | None:
        """A keyword given to the trainer or to its training arguments."""
        for call in (self.trainer_call, *self.args_calls):
            if call is None:
                continue
            for item in call.keywords:
                if item.arg == name:
                    return item.value
        return None


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class TrainingLoop:
    """Where the training loop is, and where loop-level findings go."""

    kind: Literal["loop", "framework", "none"]
    anchor: Span
    loop: LoopSite | None = None
    framework: Framework | None = None

    @property
    def note(self) -> str:
        """Appended to loop-level messages."""
        if self.framework is not None:
            return f" (the training loop is inside {self.framework.label})"
        if self.kind == "none":
            return " (no training loop that calls .backward() was found in this file)"
        return ""


def find_training_loop(facts: ModuleFacts, graph: CallGraph, source: SourceText) -> TrainingLoop:
    loop = _outermost_backward_loop(facts, graph)
    if loop is not None:
        return TrainingLoop(kind="loop", anchor=source.header_span(loop.node), loop=loop)
    framework = find_framework(facts)
    if framework is not None:
        return TrainingLoop(kind="framework", anchor=source.span(framework.call.node), framework=framework)
    return TrainingLoop(kind="none", anchor=source.line_span(0))


def _outermost_backward_loop(facts: ModuleFacts, graph: CallGraph) -> LoopSite | None:
    candidates = [loop for loop in facts.loops if graph.reaches(loop, "backward", is_backward)]
    if not candidates:
        return None
    counting = [loop for loop in candidates if not is_retry_loop(loop.node)]
    candidates = counting or candidates
    reached = {id(loop): graph.reached_scopes(loop.calls) for loop in candidates}

    def contains(outer: LoopSite, inner: LoopSite) -> bool:
        if inner.scope is outer.scope:
            return any(node is outer.node and field == "body" for node, field in inner.chain)
        return inner.scope in reached[id(outer)]

    outermost = [
        loop
        for loop in candidates
        if not any(
            other is not loop and contains(other, loop) and not contains(loop, other) for other in candidates
        )
    ]
    pool = outermost or candidates
    return max(pool, key=lambda loop: (_size(loop.node), -loop.node.lineno))


_RETRY_NAME = lazy(r"attempt|retr|tries|trial|oom", re.IGNORECASE)
_MAX_ANONYMOUS_ATTEMPTS = 10


def is_retry_loop(node: ast.stmt) -> bool:
    """A loop that runs one step again until it succeeds, not a loop that counts steps.

    Its body holds a ``try`` that leaves the loop with ``break`` on success
    (``break`` at the end of the ``try`` body, in its ``else``, or right after
    it), or it is a bounded ``for attempt in range(n)`` around a ``try``. A
    ``break`` under an ``if`` (``if step >= max_steps: break``) ends a step
    loop and does not make it a retry.
    """
    if not isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return False
    body = node.body
    tries = [
        (index, stmt)
        for index, stmt in enumerate(body)
        if isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar"
    ]
    if not tries:
        return False
    if isinstance(node, (ast.For, ast.AsyncFor)) and _bounded_attempts(node):
        return True
    for index, stmt in tries:
        after = body[index + 1] if index + 1 < len(body) else None
        try_node: ast.Try = stmt  # type: ignore[assignment]
        if (
            (try_node.body and isinstance(try_node.body[-1], ast.Break))
            or any(isinstance(item, ast.Break) for item in try_node.orelse)
            or isinstance(after, ast.Break)
        ):
            return True
    return False


def _bounded_attempts(node: ast.For | ast.AsyncFor) -> bool:
    """``for attempt in range(3)`` (``retry``, ``tries``...; ``_`` only with a small literal)."""
    target = node.target
    iterator = node.iter
    if not (
        isinstance(target, ast.Name)
        and isinstance(iterator, ast.Call)
        and call_name(iterator) == "range"
        and len(iterator.args) == 1
    ):
        return False
    if _RETRY_NAME.search(target.id):
        return True
    bound = iterator.args[0]
    return (
        target.id.strip("_") == ""
        and isinstance(bound, ast.Constant)
        and isinstance(bound.value, int)
        and bound.value <= _MAX_ANONYMOUS_ATTEMPTS
    )


def _size(node: ast.stmt) -> int:
    return (node.end_lineno or node.lineno) - node.lineno


def find_framework(facts: ModuleFacts) -> Framework | None:
    constructors = _trainer_constructors(facts)
    if facts.imports & _LIGHTNING_PACKAGES:
        clis = {"LightningCLI"} | {
            name
            for name, info in facts.classes.items()
            if any(base.endswith("LightningCLI") for base in info.bases)
        }
        for site in facts.calls:
            if site.name in clis and not is_false(keyword(site.node, "run")):
                return Framework(kind="lightning", call=site, trainer_call=None, cli=True)
            if site.name == "fit" and _is_trainer(site, constructors):
                return Framework(kind="lightning", call=site, trainer_call=constructors.get(_owner(site)))
    if facts.imports & _HF_PACKAGES:
        for site in facts.calls:
            if site.name == "train" and _is_trainer(site, constructors):
                args_calls = tuple(
                    other.node
                    for other in facts.calls
                    if other.name.endswith("TrainingArguments") or other.name in _HF_ARGUMENT_CLASSES
                )
                return Framework(
                    kind="hf", call=site, trainer_call=constructors.get(_owner(site)), args_calls=args_calls
                )
    return None


def _owner(site: CallSite) -> str:
    return last_identifier(receiver(site.node))


def _is_trainer(site: CallSite, constructors: dict[str, ast.Call]) -> bool:
    owner = _owner(site)
    return bool(owner) and (owner in constructors or owner.lower().endswith("trainer"))


def _trainer_constructors(facts: ModuleFacts) -> dict[str, ast.Call]:
    """Variables assigned from ``SomethingTrainer(...)``, by name."""
    found: dict[str, ast.Call] = {}
    groups = [scope.assigns for scope in facts.scopes] + [facts.attr_assigns]
    for group in groups:
        for name, assignments in group.items():
            for assignment in assignments:
                value = assignment.value
                if isinstance(value, ast.Call) and call_name(value).endswith("Trainer"):
                    found[name] = value
    return found
