"""The garbage collector and the event loop: what start-up left behind is never walked again.

A full collection walks every object the process tracks. Once a session has
started, the server's modules (lsprotocol's types, cattrs' generated code, the
gates' rules) are some 65,000 objects with 580,000 references, and walking
them took 50 ms of the event loop's CPU on a quiet machine and 80 ms under
load (the slow-callback check caught a page of ``arena/runs`` that paid for
one: issue 24). They live as long as the process, so after the start-up
garbage is collected they are moved out of the collector's sight
(``gc.freeze``); later collections walk only what the session made since.

Freezing costs nothing; a full collection before it cost 40-50 ms of the event loop's CPU (the
same walk), and the first ``arena/status`` of a session waited for it (issue 38 item 7). Only the
young generations are collected first: what start-up left as cyclic garbage in the old one (some
440 objects, a few tens of KB) stays frozen with the rest, a price paid once per process.

Even that young collection (a few milliseconds) ran at ``initialized``, the moment an editor
sends its first ``arena/status``: the status waited for it (21.5 ms, against 19.5 ms deferred:
medians of 20 fresh servers each, taken in turns). So it runs ``FREEZE_AFTER`` seconds later
(``freeze_soon``), when a session's first requests are answered.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

log = logging.getLogger(__name__)

FREEZE_AFTER = 1.0
"""Seconds after ``initialized`` before start-up's objects are frozen (``freeze_soon``)."""


def freeze_soon() -> None:
    """``freeze_what_start_up_made`` ``FREEZE_AFTER`` seconds from now, on this event loop."""
    asyncio.get_running_loop().call_later(FREEZE_AFTER, freeze_what_start_up_made)


def freeze_what_start_up_made() -> None:
    """Collect the young generations, then freeze every object left (called once a session began)."""
    started = time.thread_time()
    gc.collect(1)
    gc.freeze()
    if log.isEnabledFor(logging.DEBUG):  # counting walks them all (7 ms)
        log.debug(
            "froze %d objects out of the collector's walks (%.0f ms)",
            gc.get_freeze_count(),
            (time.thread_time() - started) * 1000,
        )
