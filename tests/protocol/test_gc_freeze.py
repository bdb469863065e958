"""``protocol.gc_freeze``: start-up's objects leave the collector's walks, start-up's garbage does not stay.

In a fresh interpreter: freezing the test process's own heap would change every later test.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from arena_ls.protocol import gc_freeze

PROGRAM = """
import gc, weakref
from arena_ls.protocol.app import create_server
from arena_ls.protocol import gc_freeze

server = create_server()
class Node:
    pass
garbage = Node()
garbage.self = garbage  # a cycle only the collector frees
dead = weakref.ref(garbage)
del garbage
walked_before = len(gc.get_objects())
gc_freeze.freeze_what_start_up_made()
walked_after = len(gc.get_objects())
print(walked_before, walked_after, gc.get_freeze_count(), dead() is None)
"""


def test_start_up_objects_are_frozen_and_its_garbage_collected_first() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], check=True, timeout=120, capture_output=True, text=True
    )
    walked_before, walked_after, frozen, collected = done.stdout.split()
    assert collected == "True", "a cycle made before the freeze was collected, not frozen"
    assert int(frozen) > 20_000, "the server's modules are frozen"
    assert int(walked_after) < int(walked_before) // 20, (walked_before, walked_after)


async def test_the_freeze_waits_for_the_first_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Called at ``initialized``, it freezes nothing then (the first status is on its way), but later."""
    frozen = asyncio.Event()
    monkeypatch.setattr(gc_freeze, "freeze_what_start_up_made", frozen.set)
    monkeypatch.setattr(gc_freeze, "FREEZE_AFTER", 0.05)
    gc_freeze.freeze_soon()
    assert not frozen.is_set()
    await asyncio.wait_for(frozen.wait(), 30)
