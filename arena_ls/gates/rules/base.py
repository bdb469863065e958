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
) -> Rule:
    """The rule a module declares: its documentation is that module's docstring."""
    return Rule(
        code=code,
        name=name,
        message=message,
        severity=severity,
        fix_title=fix_title,
        doc=parse_doc(docstring),
        check=check,
    )


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
