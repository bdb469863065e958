"""Static gates on trainer scripts (rule codes AR000-AR014): a pure library, no LSP.

``lint_trainer(source, fp32_only=...)`` returns ``Finding`` objects with
0-based positions (columns in characters); ``suppression_edit`` and the
findings' ``edits`` are the quick fixes; ``rule_doc_url`` links a code to
``docs/rules.md``. The rules and their docs live in ``arena_ls.gates.rules``,
mapped by ``arena_ls.gates.registry``.
"""

from __future__ import annotations

from arena_ls.gates.model import Finding, Severity, TextEdit
from arena_ls.gates.suppression import suppression_edit
from arena_ls.trainer_facts.job_args import JobArgs

DOCS_URL = "https://github.com/arena-ls/arena-ls/blob/main/docs/rules.md"


def lint_trainer(
    source: str | bytes,
    *,
    fp32_only: bool | None = None,
    checkpoint_patterns: tuple[str, ...] = (),
    jobs: tuple[JobArgs, ...] = (),
) -> list[Finding]:
    """Every gate finding for one trainer script, sorted by position (``engine.lint_trainer``).

    The rules load on the first lint, so that importing the package (the
    server does at start-up) stays cheap.
    """
    from arena_ls.gates import engine  # start-up speed: the rules load on the first lint

    return engine.lint_trainer(
        source, fp32_only=fp32_only, checkpoint_patterns=checkpoint_patterns, jobs=jobs
    )


def rule_doc_url(code: str) -> str:
    """The rule's section of docs/rules.md: ``...rules.md#ar004`` for ``AR004``."""
    return f"{DOCS_URL}#{code.strip().lower()}"


__all__ = [
    "DOCS_URL",
    "Finding",
    "JobArgs",
    "Severity",
    "TextEdit",
    "lint_trainer",
    "rule_doc_url",
    "suppression_edit",
]
