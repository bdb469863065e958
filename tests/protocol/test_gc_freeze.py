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


LOADED_BY_MAIN = """
import gc, sys, weakref
from arena_ls.protocol import main
from arena_ls.protocol.rpc import serving

class Node:
    pass

load = main._load_and_create
made: list = []

def load_with_garbage(hardware):
    server = load(hardware)
    garbage = Node()
    garbage.self = garbage  # a cycle of the load's, left for the collector
    made.append(weakref.ref(garbage))
    return server

def report(server, stdin, stdout):  # stdout: the protocol's stream (sys.stdout is stderr now)
    stdout.write(f"{gc.isenabled()} {gc.get_freeze_count()} {made[0]() is None}".encode())
    return 0

main._load_and_create = load_with_garbage
serving.serve_stdio = report
sys.exit(main.main([]))
"""


def test_the_server_loads_without_the_collector_then_collects_and_freezes_before_it_serves() -> None:
    """``protocol/main.py``: the load's objects are frozen before the first message is read, its
    garbage collected first (not frozen with them), and the collector is on again."""
    done = subprocess.run(
        [sys.executable, "-c", LOADED_BY_MAIN], check=True, timeout=120, capture_output=True, text=True
    )
    enabled, frozen, collected = done.stdout.split()
    assert enabled == "True", "the collector is on while the server serves"
    assert int(frozen) > 20_000, "the server's modules are frozen before it serves"
    assert collected == "True", "the load's garbage was collected, not frozen"


async def test_the_freeze_waits_for_the_first_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Called at ``initialized``, it freezes nothing then (the first status is on its way), but later."""
    frozen = asyncio.Event()
    monkeypatch.setattr(gc_freeze, "freeze_what_start_up_made", frozen.set)
    monkeypatch.setattr(gc_freeze, "FREEZE_AFTER", 0.05)
    gc_freeze.freeze_soon()
    assert not frozen.is_set()
    await asyncio.wait_for(frozen.wait(), 30)
