"""What a rule is: its code, names, message, severity, docs and check.

Each rule lives in its own module (``ar004_checkpoint_in_loop.py``) whose
docstring has a fixed shape, the one ``docs/rules.md`` is generated from::

    <one-line summary>

    What it checks
    --------------
    ...

    Why it matters on a 6 GB FP32-only laptop GPU
    ----------------------------------------------
    ...

    Example that fires
    ------------------
    ```python
    ...
    ```

    Write instead
    -------------
    ```python
    ...
    ```
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable

from arena_ls.diagnostics import Span
from arena_ls.gates.model import Severity, TextEdit
from arena_ls.trainer_facts.context import TrainerContext
from arena_ls.trainer_facts.job_args import JobArgs
from arena_ls.trainer_facts.patterns import lazy

SECTIONS = (
    "What it checks",
    "Why it matters on a 6 GB FP32-only laptop GPU",
    "Example that fires",
    "Write instead",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Violation:
    """One place a rule fires, before suppression comments are applied."""

    span: Span
    message: str
    severity: Severity | None = None
    """Overrides the rule's default (an unresolvable cadence is a warning)."""
    edits: tuple[TextEdit, ...] = ()
    fix_title: str | None = None
    """The title of ``edits`` when it is not the rule's own fix (the kit's callback on AR001)."""
    jobs: tuple[str, ...] = ()
    """The manifest jobs it holds for, when the jobs that run the trainer are judged apart
    (their arguments differ): a start of another job is not refused for it. Empty: every job."""


Check = Callable[[TrainerContext], Iterable[Violation]]


@dataclasses.dataclass(frozen=True, slots=True)
class RuleDoc:
    summary: str
    sections: dict[str, str]

    @property
    def example(self) -> str:
        return _code_block(self.sections["Example that fires"])

    @property
    def instead(self) -> str:
        return _code_block(self.sections["Write instead"])


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    code: str
    name: str
    message: str
    """The base message; a violation's message starts with it and may add detail."""
    severity: Severity
    fix_title: str | None
    doc: RuleDoc
    check: Check | None
    """None only for AR000, which the engine reports when the file does not parse."""


def declare(
    docstring: str | None,
    code: str,
    name: str,
    message: str,
    severity: Severity,
    check: Check | None,
    *,
    fix_title: str | None = None,
    per_job: bool = False,
) -> Rule:
    """The rule a module declares: its documentation is that module's docstring.

    ``per_job``: the rule reads values a job's arguments may set (a cadence), so each
    manifest job that runs the trainer is judged with its own (``judge_each_job``).
    """
    if per_job and check is not None:
        check = judge_each_job(check, severity)
    return Rule(
        code=code,
        name=name,
        message=message,
        severity=severity,
        fix_title=fix_title,
        doc=parse_doc(docstring),
        check=check,
    )


_RANK = {None: 0, "information": 1, "warning": 2, "error": 3}


def judge_each_job(check: Check, severity: Severity) -> Check:
    """``check`` run on the defaults, then once per distinct setting of the jobs that run the
    trainer.

    A job's setting is what its arguments give the options and configurator
    globals that judging the defaults read (``Resolver.consulted``): a job that
    sets none of them is judged by the defaults, and a sweep over an option no
    cadence reads is judged once. No job, or every job judged alike: the
    findings as they are. Jobs judged apart: the worst one's findings, naming
    the job, held only for the jobs judged as badly (a start of a job whose own
    arguments pass is not refused for another's).
    """

    def judged(ctx: TrainerContext) -> Iterable[Violation]:
        defaults = list(check(ctx))
        if not ctx.jobs:
            return defaults
        consulted = set(ctx.resolver.consulted)  # what judging the defaults read
        groups: dict[tuple[tuple[str, str], ...], list[JobArgs]] = {}
        for job in ctx.jobs:
            groups.setdefault(ctx.resolver.settings_of(job, consulted), []).append(job)
        outcomes = [
            # jobs that set none of what was read are judged by the defaults
            (
                tuple(job.job for job in jobs),
                list(check(ctx.job_view(jobs[0], settings))) if settings else defaults,
            )
            for settings, jobs in groups.items()
        ]
        shapes = {tuple((v.span, v.message, v.severity) for v in found) for _ids, found in outcomes}
        if len(shapes) == 1:
            return outcomes[0][1]

        def rank(found: list[Violation]) -> int:
            return max((_RANK[v.severity or severity] for v in found), default=0)

        worst_rank = max(rank(found) for _ids, found in outcomes)
        as_bad = [ids for ids, found in outcomes if rank(found) == worst_rank]
        worst = next(found for _ids, found in outcomes if rank(found) == worst_rank)
        held = tuple(sorted(job for ids in as_bad for job in ids))
        named = as_bad[0][0]
        others = len(held) - 1
        more = f" and {others} other job{'s' if others > 1 else ''}" if others else ""
        return [
            dataclasses.replace(v, message=f"{v.message} (job {named!r}{more})", jobs=held) for v in worst
        ]

    return judged


def parse_doc(docstring: str | None) -> RuleDoc:
    """Split a rule module's docstring into its summary and its four sections."""
    text = (docstring or "").strip("\n")
    lines = text.splitlines()
    summary = lines[0].strip() if lines else ""
    sections: dict[str, str] = {}
    current: str | None = None
    buffer: list[str] = []
    index = 1
    while index < len(lines):
        line = lines[index]
        underline = lines[index + 1] if index + 1 < len(lines) else ""
        if line.strip() in SECTIONS and underline.strip() and set(underline.strip()) == {"-"}:
            if current is not None:
                sections[current] = "\n".join(buffer).strip("\n")
            current, buffer = line.strip(), []
            index += 2
            continue
        if current is not None:
            buffer.append(line)
        index += 1
    if current is not None:
        sections[current] = "\n".join(buffer).strip("\n")
    missing = [name for name in SECTIONS if name not in sections]
    if missing:
        raise ValueError(f"rule docstring lacks sections: {', '.join(missing)}")
    return RuleDoc(summary=summary, sections=sections)


_FENCE = lazy(r"```python\n(.*?)```", re.DOTALL)


def _code_block(section: str) -> str:
    match = _FENCE.search(section)
    return match.group(1) if match else ""
