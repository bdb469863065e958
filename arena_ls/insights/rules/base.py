"""What an insight rule is: its kind, severity, docs and check.

Each rule lives in its own module, whose docstring has a fixed shape (the
one ``docs/insights.md`` is generated from)::

    <one-line summary>

    What it watches
    ---------------
    ...

    Why it matters on a 6 GB FP32-only laptop GPU
    ----------------------------------------------
    ...

    What to do
    ----------
    ...

A check is pure: given the observations of a run, the settings and the
time, it returns the message to show (which says what to do) while the
condition holds, and None when it does not.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from arena_ls.insights.model import Observations, Severity
from arena_ls.settings import InsightSettings

SECTIONS = (
    "What it watches",
    "Why it matters on a 6 GB FP32-only laptop GPU",
    "What to do",
)

Check = Callable[[Observations, InsightSettings, float], "str | None"]


@attrs.frozen
class InsightDoc:
    summary: str
    sections: dict[str, str]


@attrs.frozen
class InsightRule:
    kind: str
    severity: Severity
    doc: InsightDoc
    check: Check
    settings: tuple[str, ...] = ()
    """The settings keys (``insights.*``) that tune it, for the docs."""


def parse_doc(docstring: str | None) -> InsightDoc:
    """Split a rule module's docstring into its summary and its three sections."""
    lines = (docstring or "").strip("\n").splitlines()
    summary = lines[0].strip() if lines else ""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    index = 1
    while index < len(lines):
        line = lines[index]
        underline = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if line.strip() in SECTIONS and underline and set(underline) == {"-"}:
            current = sections.setdefault(line.strip(), [])
            index += 2
            continue
        if current is not None:
            current.append(line)
        index += 1
    missing = [name for name in SECTIONS if name not in sections]
    if missing:
        raise ValueError(f"insight docstring lacks sections: {', '.join(missing)}")
    return InsightDoc(summary, {name: "\n".join(body).strip("\n") for name, body in sections.items()})
