"""``lint_trainer``: parse once, run every rule, apply suppressions.

Bad input never raises: a file that does not parse gives one AR000 finding,
and a rule that fails on an input nobody foresaw is logged (to stderr, via
``logging``) and skipped, so the other rules still report.
"""

from __future__ import annotations

import ast
import gc
import warnings

from arena_ls.gates.model import Finding
from arena_ls.gates.registry import RULES
from arena_ls.gates.rules.ar000_syntax_error import syntax_error_finding
from arena_ls.gates.rules.base import Rule, Violation
from arena_ls.gates.suppression import parse_suppressions
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.job_args import JobArgs
from arena_ls.trainer_facts.source import SourceText, decode_source


def _log_exception(message: str, *args: object) -> None:
    """Log the current exception (``logging`` is imported only then: ``arena check`` starts faster)."""
    import logging

    logging.getLogger(__name__).exception(message, *args)


def lint_trainer(
    source: str | bytes,
    *,
    fp32_only: bool | None = None,
    checkpoint_patterns: tuple[str, ...] = (),
    jobs: tuple[JobArgs, ...] = (),
) -> list[Finding]:
    """Every gate finding for one trainer script, sorted by position.

    ``fp32_only`` is the device profile: True turns AR011 on, None (unknown)
    and False leave it off. ``checkpoint_patterns`` are the ``checkpoint.pattern``
    of the jobs that run the script: a line they match announces a checkpoint (AR014).
    ``jobs`` are those jobs' arguments: the cadence rules judge each job with the
    values its arguments set (``--ckpt-every 500``); a finding that holds for some
    of them only names them in ``Finding.jobs``.
    """
    text = SourceText(decode_source(source))
    paused = gc.isenabled()
    if paused:
        gc.disable()  # a big file builds ~100k AST objects that cannot form cycles
    try:
        return _lint(text, fp32_only, checkpoint_patterns, jobs)
    finally:
        if paused:
            gc.enable()


def _lint(
    text: SourceText, fp32_only: bool | None, checkpoint_patterns: tuple[str, ...], jobs: tuple[JobArgs, ...]
) -> list[Finding]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text.parse_text, type_comments=False)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return [syntax_error_finding(text, error)]
    suppressions = parse_suppressions(text)
    try:
        ctx = TrainerContext(
            text, tree, fp32_only=fp32_only, checkpoint_patterns=checkpoint_patterns, jobs=jobs
        )
    except Exception:  # a bug must not take the server down; the log says what happened
        _log_exception("could not analyse the trainer; no gate findings for it")
        return []
    findings: list[Finding] = []
    for rule in RULES.values():
        if rule.check is None or suppressions.file_ignores(rule.code):
            continue
        try:
            violations = list(rule.check(ctx))
        except Exception:
            _log_exception("rule %s failed; skipping it for this file", rule.code)
            continue
        findings.extend(_finding(rule, violation) for violation in violations)
    kept = [finding for finding in findings if not suppressions.silences(finding)]
    kept.sort(key=lambda f: (f.line, f.col, f.code))
    return kept


def parse_context(source: str | bytes) -> TrainerContext | None:
    """The analyses of one script, for a tool that reads it (the manifest job of ``arena init``).

    None when it does not parse or cannot be analysed.
    """
    text = SourceText(decode_source(source))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text.parse_text, type_comments=False)
        return TrainerContext(text, tree, fp32_only=None)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    except Exception:  # a bug must not take the caller down; the log says what happened
        _log_exception("could not analyse the trainer")
        return None


def _finding(rule: Rule, violation: Violation) -> Finding:
    span = violation.span
    return Finding(
        code=rule.code,
        message=violation.message,
        severity=violation.severity or rule.severity,
        line=span.line,
        col=span.col,
        end_line=span.end_line,
        end_col=span.end_col,
        fix_title=(violation.fix_title or rule.fix_title) if violation.edits else None,
        edits=violation.edits,
        jobs=violation.jobs,
    )
