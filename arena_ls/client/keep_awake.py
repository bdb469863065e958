"""``RunInfo.keepAwake`` (contract 8.3) in a few words, the same in every client.

The server says ``true`` (the agent keeps the machine awake), ``false`` (told not
to, or not a ``train`` run of this machine) or ``null``, whose reason is the
run's log line ``the machine cannot be kept awake during this run: …``: the
client reads it from the first page of the run's log (the line comes as the
agent starts) and shows it beside the state; a null without that line says
nothing (the agent, started just after the trainer, may not have decided yet).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from arena_ls.wording import keep_awake_words

KEEP_AWAKE_LINE = "the machine cannot be kept awake during this run: "
"""The agent's log line when the platform does not allow keeping the machine awake."""
REASON_LOG_LINES = 1000
"""How many of the run's first log lines are read for that line: it comes as the agent starts, after
what the trainer (started first, for speed) printed by then."""


def keep_awake_reason(lines: Iterable[Any]) -> str | None:
    """The reason of the first ``arena`` line that says the machine cannot be kept awake, or None."""
    for line in lines:
        if not isinstance(line, dict) or line.get("stream") != "arena":
            continue
        text = line.get("text")
        if isinstance(text, str) and text.startswith(KEEP_AWAKE_LINE):
            return text[len(KEEP_AWAKE_LINE) :].strip() or None
    return None


def needs_reason(run: Any) -> bool:
    """Whether ``run`` says ``keepAwake: null`` (its reason is to be read from the log)."""
    return isinstance(run, dict) and "keepAwake" in run and run["keepAwake"] is None


def keep_awake_text(run: Any, reason: str | None = None) -> str | None:
    """A live run's keep-awake state in words; None when the server does not say (an older one), and
    for a null without its log's line: the agent, started after the trainer, may not have decided yet
    (``keepAwake`` is null until then), so nothing is claimed until the line says why."""
    if not isinstance(run, dict) or "keepAwake" not in run:
        return None
    return keep_awake_words(run["keepAwake"], reason)
