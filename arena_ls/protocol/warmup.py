"""What the first ``arena/status`` waited for, done while the client reads the ``initialize`` answer.

An editor sends ``initialized`` and its first ``arena/status`` as soon as it
has the ``initialize`` answer; until they arrive the event loop has nothing
to do. Measured on the event loop between ``initialized`` and the first
status's answer (issue 38 item 7; docs/performance.md, "What the event loop
does before the first status"): the workspace's construction imported the
gates' modules (7 ms of the loop's CPU with their bytecode cached, 37 ms of
wall time on a loaded machine; they are kept out of ``initialize`` for
start-up's speed), cattrs generated and compiled the code that structures
the client's first messages of their kind (``initialized``, the answer to
``workspace/configuration``, a custom request: 3-7 ms), and the status's
reads on worker threads each waited for the default executor to start its
thread (three thread starts, 2-12 ms).

So once the ``initialize`` answer is written, ``warm_up`` starts the default
executor's threads, one importing those modules, one structuring a message
of each of those kinds: that work is done while the client is busy with the
answer, not after the status arrived. The workspace is opened once the
imports are done (``ArenaServer.workspace`` awaits them: the loop never
imports them); a structuring function made twice is only made twice.

And start-up's own work waits for that first status (``FirstStatus``): the
GPUs' first reading (importing and starting NVML: 10-20 ms of CPU on a
thread that held the GIL while the status was answered) and the trainers'
first verdicts begin once it is answered (``AFTER_FIRST_STATUS_WAIT`` at
most, for a client that never asks). A plain first status took 31 ms with
them beside it and 17 ms without, on a machine where a 20-million-addition
loop takes 1.8 s (docs/performance.md, "The first status, seventh session").
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

WORKSPACE_MODULES = (
    "arena_ls.gates.budget",
    "arena_ls.gates.cache",
    "arena_ls.gates.severity",
)
"""The modules ``services.workspace`` imports inside ``WorkspaceServices.__init__`` (start-up speed)."""

WAIT_FOR_IMPORTS = 10.0
"""Seconds the workspace's opening waits for the warm-up's imports at most; past that (a machine
so loaded that the thread never ran) it imports them itself, as before the warm-up."""

AFTER_FIRST_STATUS_WAIT = 0.25
"""Seconds after ``initialized`` that start-up's own work waits for the first ``arena/status`` at
most. An editor sends it with ``initialized`` and has its answer in tens of milliseconds; for a
client that never asks, the gates' first verdicts and diagnostics (they wait for the device
profile, the GPUs' first reading) come this much later at most."""

THREADS = 3
"""Worker threads started ahead (the two warm-up tasks' and one more): a first status runs two
reads off the loop while the trainers' first verdicts hold a third."""


def warm_up(protocol: Any) -> asyncio.Future[None]:
    """Schedule the warm-up after the current callback (the ``initialize`` handler: its answer is
    written first). ``protocol``: the server's ``ArenaProtocol``. Returns a future done once the
    workspace's modules are imported (whether they could be or not)."""
    loop = asyncio.get_running_loop()
    imported: asyncio.Future[None] = loop.create_future()
    loop.call_soon(_start, loop, protocol, imported)
    return imported


def _start(loop: asyncio.AbstractEventLoop, protocol: Any, imported: asyncio.Future[None]) -> None:
    try:
        imports = loop.run_in_executor(None, import_workspace_modules)
        imports.add_done_callback(lambda _: _set(imported))
        loop.run_in_executor(None, structure_first_messages, protocol)
        for _ in range(THREADS - 2):
            loop.run_in_executor(None, _nothing)
    except RuntimeError:  # the executor is shut down (the server is ending): nothing to warm
        _set(imported)


def _set(imported: asyncio.Future[None]) -> None:
    if not imported.done():
        imported.set_result(None)


def import_workspace_modules() -> None:
    """Import ``WORKSPACE_MODULES`` (a worker thread); a failure is logged, and met again where the
    workspace imports them."""
    for name in WORKSPACE_MODULES:
        try:
            importlib.import_module(name)
        except Exception:
            log.exception("warming up: importing %s failed", name)


def structure_first_messages(protocol: Any) -> None:
    """``ArenaProtocol.warm_structuring`` (a worker thread); a failure is logged only."""
    try:
        protocol.warm_structuring()
    except Exception:
        log.exception("warming up: structuring the first messages failed")


def _nothing() -> None:
    """A task that only makes the executor start a thread."""


class FirstStatus:
    """The moment a session's first ``arena/status`` is answered: start-up's own work waits for it."""

    def __init__(self) -> None:
        self._answered = asyncio.Event()

    def answered(self) -> None:
        """Called by the status handler before it returns: those waiting run after the answer is
        written (the answer is sent by a callback of the handler's task, scheduled after this)."""
        if not self._answered.is_set():
            asyncio.get_running_loop().call_soon(self._answered.set)

    async def then(self, work: Callable[[], Awaitable[None]]) -> None:
        """``work()`` once the first status is answered, or ``AFTER_FIRST_STATUS_WAIT`` from now."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._answered.wait(), AFTER_FIRST_STATUS_WAIT)
        await work()
