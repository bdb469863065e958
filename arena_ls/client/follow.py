"""Following a run to its end: its log, a live progress bar, and Ctrl-C.

Lines come from ``arena/log`` notifications; every line has a ``seq`` that
counts up from 0, so a gap (or the rate bound's summary line) is filled by
paging ``arena/logs`` from a cursor: each line is printed once, in order, and
none is lost. The run's numbers come from ``arena/statusChanged`` and
``arena/status`` (polled once a second) and from the server's ``$/progress``
reports.

Ctrl-C never stops a run by itself. Following a run you started
(``arena start --follow``, ``arena demo``), one Ctrl-C detaches after a short
window and leaves the run going; a second Ctrl-C inside that window asks the
trainer to checkpoint and stop instead (a cooperative ``arena/stop`` with
``confirm: true``: the user asked for it twice) and keeps following until it
ends, and a Ctrl-C after that detaches at once (the stop request stands).
Re-attached with ``arena logs -f``, Ctrl-C only detaches.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import math
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from arena_ls.client.announcements import shown
from arena_ls.client.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, from_rpc_error
from arena_ls.client.lspclient import JsonRpcError, LspSession, Notification, ServerExited
from arena_ls.client.render import FINAL_STATUSES, OK_STATUSES, FollowView, ProgressState

INTERRUPT = "arena-client/interrupt"
"""A notification the client queues for itself when Ctrl-C arrives."""
POLL_INTERVAL = 1.0
TICK = 0.25
PAGE_LIMIT = 1000
DRAIN_TIMEOUT = 15.0
STOP_SETTLE_TIMEOUT = 10.0
STOP_WINDOW_SECONDS = 2.0
"""After a first Ctrl-C, a second one within this many seconds stops the run instead of detaching."""
STOP_WINDOW_ENV = "ARENA_STOP_WINDOW_SECONDS"


def stop_window() -> float:
    """The Ctrl-C window (``ARENA_STOP_WINDOW_SECONDS`` overrides the default)."""
    try:
        value = float(os.environ.get(STOP_WINDOW_ENV, STOP_WINDOW_SECONDS))
    except ValueError:
        return STOP_WINDOW_SECONDS
    return value if 0 < value < math.inf else STOP_WINDOW_SECONDS


class OnInterrupt(enum.Enum):
    """What Ctrl-C does while following."""

    DETACH = "detach"
    """Re-attached (``arena logs -f``): Ctrl-C detaches at once; nothing is ever stopped."""
    DETACH_OR_STOP = "detach-or-stop"
    """Started here: one Ctrl-C detaches after the window; a second within it stops the run."""


@attrs.frozen
class FollowResult:
    info: dict[str, Any]
    detached: bool = False

    @property
    def exit_code(self) -> int:
        if self.detached:
            return EXIT_INTERRUPTED
        return EXIT_OK if self.info.get("status") in OK_STATUSES else EXIT_FAILED


@contextlib.contextmanager
def interrupts_to(queue: asyncio.Queue[Notification]) -> Iterator[None]:
    """While inside, Ctrl-C (SIGINT) queues an ``INTERRUPT`` instead of raising."""
    loop = asyncio.get_running_loop()

    def push() -> None:
        queue.put_nowait(Notification(INTERRUPT, None))

    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, push)
        on_loop = True
    except (NotImplementedError, RuntimeError):  # Windows: no loop signal handlers
        signal.signal(signal.SIGINT, lambda *_: loop.call_soon_threadsafe(push))
        on_loop = False
    try:
        yield
    finally:
        if on_loop:
            loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)


class TerminalFollow:
    """Follows one run of one session until it ends or the user detaches."""

    def __init__(
        self,
        session: LspSession,
        view: FollowView,
        info: dict[str, Any],
        title: str,
        clock: Callable[[], float] = time.monotonic,
        on_interrupt: OnInterrupt = OnInterrupt.DETACH,
        window: float = STOP_WINDOW_SECONDS,
        raw: bool = False,
    ) -> None:
        self.session = session
        self.raw = raw
        """Print the trainer's ``@arena`` lines too (hidden by default: see ``announcements``)."""
        self.view = view
        self.info = info
        self.run_id = str(info["runId"])
        self.state = ProgressState(title)
        self.state.apply_info(info)
        self.clock = clock
        self.cursor: str | None = None
        self.next_seq = 0
        self.tokens: set[str] = set()
        self.on_interrupt = on_interrupt
        self.window = window
        self.detach_at: float | None = None
        """Set by a first Ctrl-C: when to detach unless a second one stops the run."""
        self.last_poll = -math.inf
        self.stop_task: asyncio.Task[None] | None = None

    @property
    def final(self) -> bool:
        return self.info.get("status") in FINAL_STATUSES

    async def run(self) -> FollowResult:
        with interrupts_to(self.session.notifications):
            self.view.open()
            try:
                return await self._follow()
            finally:
                self.view.close()

    async def _follow(self) -> FollowResult:
        await self.catch_up()
        await self.poll()
        while not self.final:
            event = await self._next_event()
            if event is not None and event.method == INTERRUPT:
                if self._interrupt():
                    return await self._detach()
            elif event is not None:
                await self.handle(event)
            if self.detach_at is not None and self.clock() >= self.detach_at:
                return await self._detach()
            if self.clock() - self.last_poll >= POLL_INTERVAL:
                await self.poll()
            self.view.progress(self.state)
        await self._drain()
        self.view.progress(self.state)
        return FollowResult(self.info)

    async def _next_event(self) -> Notification | None:
        try:
            return await asyncio.wait_for(self.session.notifications.get(), TICK)
        except asyncio.TimeoutError:
            return None

    # -- events ---------------------------------------------------------------------------

    async def handle(self, event: Notification) -> None:
        params = event.params if isinstance(event.params, dict) else {}
        if event.method == "arena/log" and params.get("runId") == self.run_id:
            if self.on_lines(params.get("lines") or []):
                await self.catch_up()
        elif event.method == "arena/statusChanged" and params.get("runId") == self.run_id:
            self.update(params)
        elif event.method == "$/progress":
            self.on_progress(params)

    def update(self, info: dict[str, Any]) -> None:
        if self.final:
            return
        self.info = info
        self.state.apply_info(info)

    def on_progress(self, params: dict[str, Any]) -> None:
        token, value = str(params.get("token")), params.get("value")
        if not isinstance(value, dict):
            return
        kind = value.get("kind")
        if kind == "begin" and (value.get("title") == self.state.title or self.run_id in token):
            self.tokens.add(token)
        if token not in self.tokens:
            return
        if kind == "end":
            self.tokens.discard(token)
            self.last_poll = -math.inf  # the run probably ended: ask now
        else:
            self.state.apply_report(value)

    # -- lines ----------------------------------------------------------------------------

    def on_lines(self, lines: list[Any]) -> bool:
        """Print the lines that come next; True when some are missing (page them in)."""
        for line in lines:
            seq = line.get("seq") if isinstance(line, dict) else None
            if not isinstance(seq, int) or line.get("summary"):
                return True
            if seq < self.next_seq:
                continue
            if seq > self.next_seq:
                return True
            self._emit(line)
        return False

    def _emit(self, line: dict[str, Any]) -> None:
        seq = line.get("seq")
        if isinstance(seq, int) and seq >= 0:
            if seq < self.next_seq:
                return
            self.next_seq = seq + 1
        if shown(line, raw=self.raw):
            self.view.line(line)

    async def catch_up(self) -> bool:
        """Page ``arena/logs`` to its end; True when the server says the run's log is done."""
        while True:
            page = await self.session.request(
                "arena/logs", {"runId": self.run_id, "cursor": self.cursor, "limit": PAGE_LIMIT}
            )
            self.cursor = page.get("cursor") or self.cursor
            lines = page.get("lines") or []
            for line in lines:
                self._emit(line)
            if not lines:
                return bool(page.get("done"))

    async def _drain(self) -> None:
        """The run ended: print what is left of its log (waiting a little for the last lines)."""
        deadline = self.clock() + DRAIN_TIMEOUT
        while not await self.catch_up() and self.clock() < deadline:
            await asyncio.sleep(0.1)

    # -- status ---------------------------------------------------------------------------

    async def poll(self) -> None:
        self.last_poll = self.clock()
        status = await self.session.request("arena/status", {})
        for run in status.get("runs") or []:
            if isinstance(run, dict) and run.get("runId") == self.run_id:
                self.update(run)

    # -- Ctrl-C ---------------------------------------------------------------------------

    def _interrupt(self) -> bool:
        """Ctrl-C: True to detach now; otherwise the window opens or the stop is asked for."""
        if self.on_interrupt is OnInterrupt.DETACH or self.stop_task is not None:
            return True
        if self.detach_at is None:
            self.detach_at = self.clock() + self.window
            self.view.note(
                f"detaching in {self.window:g} s; run {self.run_id} keeps going. "
                "Press Ctrl-C again to stop it instead (it checkpoints and exits)"
            )
            return False
        self.detach_at = None
        self.view.note(
            f"stopping: asked the trainer of run {self.run_id} to checkpoint and stop; "
            "following until it ends (Ctrl-C to detach; the stop request stands)"
        )
        self.stop_task = asyncio.get_running_loop().create_task(self._request_stop())
        return False

    async def _detach(self) -> FollowResult:
        await self._settle_stop()
        job = str(self.info.get("jobId") or "")
        if self.stop_task is not None:
            self.view.note(
                f"detached; run {self.run_id} is stopping (it checkpoints and exits). "
                f"See it with: arena logs -f {job}".rstrip()
            )
        else:
            self.view.note(
                f"detached; run {self.run_id} keeps going. Re-attach with: arena logs -f {job} · "
                f"stop it with: arena stop {job}".rstrip()
            )
        return FollowResult(self.info, detached=True)

    async def _request_stop(self) -> None:
        try:
            await self.session.request("arena/stop", {"runId": self.run_id, "confirm": True, "wait": False})
        except JsonRpcError as error:
            self.view.note(f"stop failed: {from_rpc_error(error).message}")
        except ServerExited:
            self.view.note("stop failed: the language server exited")

    async def _settle_stop(self) -> None:
        """Detaching: let a stop request already on its way reach the server."""
        if self.stop_task is not None and not self.stop_task.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.stop_task), STOP_SETTLE_TIMEOUT)


async def follow_run(
    session: LspSession,
    view: FollowView,
    info: dict[str, Any],
    title: str,
    on_interrupt: OnInterrupt = OnInterrupt.DETACH,
    *,
    raw: bool = False,
) -> FollowResult:
    """Follow a run; an error the server answers becomes a ``CliError``."""
    following = TerminalFollow(
        session, view, info, title, on_interrupt=on_interrupt, window=stop_window(), raw=raw
    )
    try:
        return await following.run()
    except JsonRpcError as error:
        raise from_rpc_error(error) from error
