"""The trainer's ``@arena {...}`` lines: what ``--follow`` and ``arena logs`` leave out.

A trainer announces its progress, checkpoints, evals and health on lines of
its own (contract section 3); the reference trainer prints a readable line
beside each, so showing both gives three lines per 10 steps where one says
it all. The client hides an announcement by default (``--raw`` shows every
line as logged). A line that only looks like one (``@arena`` and text that is
not a JSON object naming its ``event``) is shown: it may be the trainer's
mistake, and the person should see it.
"""

from __future__ import annotations

import json
from typing import Any

PREFIX = "@arena "
LONGEST = 64 * 1024
"""An announcement longer than this is shown: no trainer announces that much, and parsing
it for every line would cost more than it saves."""


def is_announcement(line: Any) -> bool:
    """Whether a ``LogLine`` is a well-formed ``@arena`` announcement on the trainer's stdout."""
    if not isinstance(line, dict) or line.get("stream") != "stdout":
        return False
    text = line.get("text")
    if not isinstance(text, str) or not text.startswith(PREFIX) or len(text) > LONGEST:
        return False
    try:
        payload = json.loads(text[len(PREFIX) :])
    except (ValueError, RecursionError):
        return False
    return isinstance(payload, dict) and isinstance(payload.get("event"), str)


def shown(line: Any, *, raw: bool) -> bool:
    """Whether the client prints ``line``: every line with ``raw``, else all but announcements."""
    return raw or not is_announcement(line)
