"""Which lines of a capped log's dropped middle are kept (``logs.maxRunMb``, contract 7.1).

Every progress, checkpoint, eval and health event, so that ``arena/metrics``,
the plots, the insights and the relaunch decisions read the same run with or
without the cap. A line is kept when it is an ``@arena`` announcement of any
kind, or when the job's parser (its patterns, else the built-in spellings)
reads an event in it; the agent's own ``arena`` lines are kept by the writer.
Keeping a line too many costs a few bytes; missing one would lose a
checkpoint, so the test is the widest of the readers': the built-in
checkpoint spellings count even once the trainer speaks ``@arena``.
"""

from __future__ import annotations

from collections.abc import Callable

from arena_ls.run.log_record import inert_lines
from arena_ls.run.trainer_announcements import ARENA_PREFIX_BYTES, EventParser


def event_filters(
    progress: object, checkpoint: object
) -> tuple[Callable[[bytes, bool], bool], Callable[[bytes], bool]]:
    """(can a chunk hold an event, is a line one) for a job's patterns (as ``spec.json`` has them).

    The first is told whether the chunk is a ``FLAG_QUIET`` record (the writer found no ``@arena``
    line and no "checkpoint" in it, for a job without patterns): then only the progress spellings
    are looked for, which spares a dropped flood's every megabyte a case-blind search (issue 39)."""
    try:
        parser = EventParser.for_patterns(
            progress if isinstance(progress, str) else None,
            checkpoint if isinstance(checkpoint, str) else None,
        )
    except Exception:  # a pattern the spec holds but this version cannot compile: keep more, not less
        parser = EventParser()

    patterned = parser.progress_pattern is not None or parser.checkpoint_pattern is not None

    def may_hold(data: bytes, quiet: bool) -> bool:
        if quiet and not patterned:
            return parser.use_defaults and not inert_lines(data)
        return parser.might_match(data)

    def is_event(raw: bytes) -> bool:
        if ARENA_PREFIX_BYTES in raw:
            return True
        text = raw.decode("utf-8", "replace")
        if "\r" in text:
            text = text.rsplit("\r", 1)[-1] or text
        parser.speaks_arena = False
        return parser.parse_safely(text) is not None

    return may_hold, is_event
