"""The one follower of a server's runs: it reads each run's files and tells the listener.

Every run's story is in its folder: ``state.json`` (its status, rewritten
by the run's own agent process: the job agent, or a cluster run's agent) and
``output.log`` / ``output.idx`` (its lines). A server has exactly one
``RunFollower``: one asyncio task that re-reads those files for every run,
hands new lines and status changes to the ``Listener``, and judges runs
whose agent process is gone (once a second). Whoever needs to wait for a
run (a start for its trainer's pid, a stop for the final status) does not
poll the files itself: it subscribes with ``until`` and the follower tells
it, following that run in a hurry meanwhile. The task's rounds read the lines
on a worker thread (``read_off_loop``): the event loop only takes ready batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Protocol

import attrs

from arena_ls.lifecycle.follower_told import StatusesTold
from arena_ls.lifecycle.runview import LineBatch, RunView
from arena_ls.lifecycle.state_watch import StateWatch
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.capture import LogLine
from arena_ls.run.state_folder import StateFolder

log = logging.getLogger(__name__)

FAST_POLL = 0.005
"""While lines are flowing and nothing wakes the follower when they are written (macOS, Windows, a
folder inotify cannot watch): follow the files every 5 ms (a line reaches the editor about 3 ms
after it was written, on average, with the ``arena/log`` batching's leading edge). Where every
run is watched (``StateWatch.sees_every_run``), a write wakes a round at most this soon after
the last one, and the rounds between are ``WATCHED_POLL`` apart."""
UNWOKEN_POLL_MOST = 0.04
"""...and there, after a round that found no new line, the next one comes twice as late, up to
40 ms, until a round finds lines again: a trainer printing a line every 100 ms costs some 5
rounds between two lines instead of 20 (its server spent 0.2 s of CPU a second on them), and a
line waits 40 ms at most. At 100 lines a second nearly every round finds one: every 5 ms."""
FLOOD_POLL = 0.02
"""...but every 20 ms while a run floods (a poll read ``FLOOD_LINES`` or more): each poll then reads
up to 64 KiB, far more than ``arena/log`` may send, and polling faster would only take the CPU the
trainer and its agent need."""
FLOOD_LINES = 200
QUIET_POLL = 0.1
"""A run is active but silent, and nothing wakes the follower when it writes: every 100 ms."""
WATCHED_POLL = 0.5
"""Where every unfinished run is watched (``StateWatch.sees_every_run``), its writes and its
replaced states wake the rounds: between them, one every 500 ms (the agents' liveness is looked
at every ``LIVENESS_INTERVAL`` at most, at a round). A silent run cost its server 0.9 s of CPU a
minute at the 100 ms pace, on a machine where a 20-million-addition loop takes 1.7-2.3 s."""
SLOW_POLL = 0.25
"""Nothing is active."""
QUIET_AFTER = 1.0
LIVENESS_INTERVAL = 1.0
HURRY_FIRST = 0.005
"""While someone waits for a run: its files are read again after 5 ms, then 10, up to ``FAST_POLL``."""


class Listener(Protocol):
    """What the supervisor tells the protocol layer."""

    def run_changed(self, view: RunView) -> None: ...
    def run_lines(self, view: RunView, lines: list[LogLine]) -> None: ...
    def lifecycle(self, view: RunView, event: AgentRecord) -> None:
        """A record of the run's supervisor (its words: ``event.render()``)."""

    def warning(self, text: str) -> None:
        """Damage found in the state folder (shown to the user once; already logged on stderr)."""


class FollowedRuns(Protocol):
    """The runs the follower follows, and their adoption (the supervisor)."""

    views: dict[str, RunView]

    @property
    def folder(self) -> StateFolder: ...

    def scan(self, *, list_folder: bool = True) -> None:
        """Adopt the runs that appeared in the state folder (``list_folder=False``: the round's
        worker thread has just listed it, ``list_history``)."""

    def list_history(self) -> None:
        """List the state folder's runs again if they changed (files only: on a worker thread)."""

    def retry_damaged(self, view: RunView) -> None:
        """Look at a damaged run's files again."""

    def check_lost(self, view: RunView) -> bool:
        """Give the verdict on an unfinished run whose agent is gone (``RunView.check_lost``)."""

    def report_damage(self, view: RunView) -> None:
        """Report a run's damage to the user (once)."""

    def idle(self) -> None:
        """No run is active: get ready for the next start (called after each full round that finds none)."""

    def busy(self) -> None:
        """A run is active: let go of what ``idle`` got ready (after each full round that finds one)."""


Condition = Callable[[RunView], bool]
Batches = dict[str, LineBatch]
"""Runs' new lines read off the event loop, by run id."""


async def woken_or_timed_out(wake: asyncio.Event, timeout: float) -> None:
    """Wait until ``wake`` is set or ``timeout`` passes; a cancellation always goes through.

    Not ``wait_for(wake.wait(), timeout)``: Python 3.10's and 3.11's ``wait_for`` swallows a
    cancellation that comes as its inner wait completes, and ``asyncio.run``, ending a server
    whose client left, cancels the follower once: a server waited for it for ever, holding its
    gates worker and spare agent (found in CI, the client an editor's that was killed)."""
    if wake.is_set():
        return
    waiter = asyncio.ensure_future(wake.wait())
    try:
        await asyncio.wait([waiter], timeout=timeout)
    finally:
        waiter.cancel()


async def read_off_loop(
    views: list[RunView], *, records: bool = False, first: Callable[[], None] | None = None
) -> Batches:
    """Each followed run's new lines, read and scanned on a worker thread (``RunView.read_batch``).

    Under a flood a round reads and scans hundreds of lines per run: on the event loop that
    held every request behind it (an ``arena/status`` waited 10-30 ms behind a round). The
    loop only takes the ready batches. A run whose read fails here is read again on the loop,
    where the failure is handled as before (the run is marked damaged, and the others go on).

    ``records`` (the follower floods): each run's records are read and decoded there too, and
    the loop only hands out their items (``RunRecords.read_ahead``; before, their decoding took
    the loop 4 ms a read, and a round's callback passed 5 ms). So are those of a run whose
    records reader is behind its lines (a flood's backlog after its end, a late subscriber's
    catch-up). Otherwise the records are the loop's to read again (a trickle's are read with its
    lines, wherever those are read: a status sees the progress of the lines it was told).

    ``first`` runs on the same thread before the reads (the round's listing of the runs folder)."""
    wanted = [view for view in views if not view.drained and view.damage is None]
    if not wanted and first is None:
        return {}
    return await asyncio.to_thread(_read_batches, wanted, records, first)


def _read_batches(views: list[RunView], records: bool, first: Callable[[], None] | None = None) -> Batches:
    if first is not None:
        with contextlib.suppress(Exception):  # the loop's scan lists the folder again, and reports
            first()
    batches: Batches = {}
    for view in views:
        ahead = records or view.records_behind()
        if not ahead:
            view.records.end_ahead()
        with contextlib.suppress(Exception):  # read again on the loop (see ``read_off_loop``)
            batches[view.run_id] = view.read_batch(records=ahead)
    return batches


@attrs.define
class _Waiter:
    view: RunView
    condition: Condition
    done: asyncio.Future[None]
    most: float
    """The longest pause between two reads of the waited run."""


class RunFollower:
    """Follows every run of a workspace for one server (see the module docstring)."""

    def __init__(self, runs: FollowedRuns, listener: Listener) -> None:
        self.runs = runs
        self.listener = listener
        self._waiters: list[_Waiter] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_liveness = 0.0
        self._last_data = 0.0
        self._full_due = 0.0
        self._hurry = HURRY_FIRST
        self._closed = False
        self._lines_last_poll = 0
        """Lines the last full round read (a flood is followed at ``FLOOD_POLL``)."""
        self._last_poll = 0.0
        self._last_busy = False
        self._state_watch = StateWatch(self._state_replaced, self._lines_written)
        """Wakes the rounds when an agent replaces an unfinished run's state or writes its lines (Linux)."""
        self._told_in_round = math.inf
        """The pace asked by a state replaced or lines written while a round read (``_round_within``)."""
        self._unwoken_pace = FAST_POLL
        """The pace while lines flow where no write wakes the rounds (``UNWOKEN_POLL_MOST``)."""
        self.told = StatusesTold(lambda run_id: run_id in runs.views)
        """What the listener was told of each run: whoever announces a run asks it what was
        missed since (``missed_since_told``)."""

    # -- the task ------------------------------------------------------------------------

    def ensure_running(self) -> None:
        if self._closed:
            return  # a closed follower is never started again (a request still in flight)
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            self._state_watch.start(loop)
            self._task = loop.create_task(self._follow_forever())

    async def close(self) -> None:
        """Stop following; whoever still waits for a run is cancelled (the server is going away).

        The loop also ends by ``_closed``, not by the cancellation alone: Python 3.11's
        ``wait_for`` swallows a cancellation that comes as its inner wait completes (the
        loop's wake set by a request in flight), and a close that waited for that task
        never returned (a TCP client that left with ``arena/start`` in flight, issue 24).
        """
        self._closed = True
        self._state_watch.close()
        for waiter in self._waiters:
            waiter.done.cancel()
        task = self._task
        if task is not None:
            self._wake.set()
            task.cancel()
            # ``asyncio.wait``, not ``await task`` in a suppress: a close that is itself cancelled
            # (a caller's timeout) must raise, not pass for a follower that ended.
            await asyncio.wait([task])
            if not task.cancelled() and task.exception() is not None:
                log.error("the follower ended with an error", exc_info=task.exception())

    def wake(self) -> None:
        """Follow every run now (a run was started, a stop requested, the settings changed)."""
        self._full_due = 0.0
        self._wake.set()

    def _state_replaced(self) -> None:
        """An agent replaced a run's state: a round now, but not within ``FAST_POLL`` of the last
        (an agent that rewrote its state a thousand times a second must not cost a thousand rounds)."""
        self._round_within(FAST_POLL)

    def _lines_written(self) -> None:
        """An agent wrote lines to a watched run: a round now, but not within the flowing pace of
        the last (``FAST_POLL``; ``FLOOD_POLL`` in a flood, whose writes come without pause)."""
        self._round_within(self._flowing_pace())

    def _round_within(self, pace: float) -> None:
        """The next round at most ``pace`` after the last; told while a round reads, after it too
        (the change may have come after its reads: ``_follow_forever``). The task is woken only
        when its next round comes sooner: a flood's writes, hundreds a second, would otherwise
        wake it for nothing between two rounds."""
        self._told_in_round = min(self._told_in_round, pace)
        due = self._last_poll + pace
        if due < self._full_due:
            self._full_due = due
            self._wake.set()

    def _flowing_pace(self) -> float:
        return FLOOD_POLL if self._lines_last_poll >= FLOOD_LINES else FAST_POLL

    async def _follow_forever(self) -> None:
        while not self._closed:
            if time.monotonic() >= self._full_due:
                self._told_in_round = math.inf
                busy = await self._round_safely()
                self._full_due = time.monotonic() + self._interval(busy)
                # a state or lines told while the round read: maybe after its reads
                self._full_due = min(self._full_due, self._last_poll + self._told_in_round)
            elif self._waiters:
                await self._poll_waited()
            delay = self._full_due - time.monotonic()
            if self._waiters:
                delay = min(delay, self._hurry)
                self._hurry = min(self._hurry * 2, min(w.most for w in self._waiters))
            await woken_or_timed_out(self._wake, max(0.0, delay))
            self._wake.clear()

    async def _round_safely(self) -> bool:
        """A round over every run, its files read on a worker thread (``read_off_loop``)."""
        try:
            listed = self._liveness_due()
            views = list(self.runs.views.values())
            first = self.runs.list_history if listed else None
            batches = await read_off_loop(views, records=self.flooding, first=first)
            return self.poll_once(batches, listed=listed)
        except Exception:  # never let one bad run stop the following of others
            log.exception("following runs failed")
            return False

    def _interval(self, busy: bool) -> float:
        if not busy:
            return SLOW_POLL
        if self._lines_last_poll >= FLOOD_LINES:
            return FLOOD_POLL
        if self._state_watch.sees_every_run:
            return WATCHED_POLL  # every write wakes a round (``_lines_written``, ``_state_replaced``)
        if time.monotonic() - self._last_data >= QUIET_AFTER:
            return QUIET_POLL
        if self._lines_last_poll:
            self._unwoken_pace = FAST_POLL
        else:
            self._unwoken_pace = min(2 * self._unwoken_pace, UNWOKEN_POLL_MOST)
        return self._unwoken_pace

    # -- following -----------------------------------------------------------------------

    def poll_unless_recent(self, max_age: float) -> bool:
        """``poll_once``, unless a round ended less than ``max_age`` seconds ago (its verdict then):
        a status request or a flush every few ms must not multiply the reading of a flood."""
        if time.monotonic() - self._last_poll < max_age:
            return self._last_busy
        if self.flooding:
            self._refresh_states()
            return self._last_busy
        return self.poll_once()

    @property
    def flooding(self) -> bool:
        """The last round read a flood (``FLOOD_LINES`` or more), and the follower's task runs:
        its rounds read the lines off the loop, so a request or a flush reads the states only."""
        return self._lines_last_poll >= FLOOD_LINES and self._task is not None and not self._task.done()

    def _refresh_states(self) -> None:
        """During a flood: every run's state at once, and its lines with the follower's next round
        (read off the loop), unless its status changed: then its lines are read here first, so
        that every line before a status change is told before the change."""
        for view in list(self.runs.views.values()):
            if view.drained or view.damage is not None:
                continue
            try:
                status = view.status
                view.refresh_state()
                if view.status != status:
                    self.follow(view, check_liveness=False)
                else:
                    self.notify_if_changed(view)
            except Exception as error:  # as in ``_poll_isolated``: the other runs go on
                log.exception("following run %s failed", view.run_id)
                view.mark_damaged(f"its files cannot be read: {error}")
        self._settle()

    def poll_once(self, batches: Batches | None = None, *, listed: bool = False) -> bool:
        """Follow every unfinished run once; True while any run is active.

        ``batches`` holds runs' new lines already read (off the loop, by ``read_off_loop``);
        a run without one is read here. ``listed``: the runs folder too (``list_history``)."""
        batches = batches or {}
        now = time.monotonic()
        self._lines_last_poll = 0
        check_liveness = self._liveness_due(now)
        if check_liveness:
            self._last_liveness = now
            self.runs.scan(list_folder=not listed)
        active = False
        for view in list(self.runs.views.values()):
            active = self._poll_isolated(view, check_liveness, batches.get(view.run_id)) or active
        self._settle()
        if not active:
            self.runs.idle()
        else:
            self.runs.busy()
        self._state_watch.follow(view.run_dir.path for view in self.runs.views.values() if not view.is_final)
        self._last_poll, self._last_busy = time.monotonic(), active
        return active

    def _liveness_due(self, now: float | None = None) -> bool:
        """Whether this round looks at every run's liveness (and adopts new runs: ``scan``)."""
        return (time.monotonic() if now is None else now) - self._last_liveness >= LIVENESS_INTERVAL

    async def _poll_waited(self) -> None:
        """Follow only the runs someone waits for (between rounds over every run)."""
        views = list({id(w.view): w.view for w in self._waiters}.values())
        batches = await read_off_loop(views, records=self.flooding)
        for view in views:
            self._poll_isolated(view, check_liveness=False, batch=batches.get(view.run_id))
        self._settle()

    def _poll_isolated(self, view: RunView, check_liveness: bool, batch: LineBatch | None = None) -> bool:
        try:
            active = self._poll_view(view, check_liveness, batch)
        except Exception as error:  # one run's files never stop the following of others
            log.exception("following run %s failed", view.run_id)
            view.mark_damaged(f"its files cannot be read: {error}")
            active = False
        self.runs.report_damage(view)
        return active

    def _poll_view(self, view: RunView, check_liveness: bool, batch: LineBatch | None) -> bool:
        view.reap_agent()
        if view.drained and not check_liveness:
            return False  # ended and read to its end: looked at again once a second only
        if not view.run_dir.path.is_dir():  # pruned or deleted by hand
            self.runs.views.pop(view.run_id, None)
            return False
        if view.damage is not None:
            if check_liveness:
                self.runs.retry_damaged(view)
                view.free_if_damaged(self.runs.folder)
            return False
        if view.is_final and view.read_to_end():
            view.drained = True
            return False
        self.follow(view, check_liveness, batch)
        return True

    def follow(self, view: RunView, check_liveness: bool, batch: LineBatch | None = None) -> None:
        """Read a run's state and new lines once; tell the listener what changed.

        With ``batch`` (the lines read off the loop) the files are read here only when the
        run's status changed meanwhile: the lines up to the change are told before it."""
        status = view.status
        view.refresh_state()
        applied = view.apply_batch(batch) if batch is not None else None
        lines = applied if applied is not None else []
        if batch is None or view.status != status:
            lines = lines + view.read_new_lines()
        if lines:
            self._last_data = time.monotonic()
            self._lines_last_poll += len(lines)
            self.listener.run_lines(view, lines)
            for line in lines:
                if line.event is not None:
                    self.listener.lifecycle(view, line.event)
        if check_liveness:
            self.runs.check_lost(view)
            view.check_disk()
        self.notify_if_changed(view)

    def notify_if_changed(self, view: RunView) -> None:
        """Tell the listener about every change of a run's state, once.

        Whoever re-read the state (a status request, the probe's watch), the
        change is compared with what was last announced, so no status change
        goes unannounced and none is announced twice.
        """
        snapshot = view.snapshot()
        if snapshot == view.notified:
            return
        view.notified = snapshot
        self._last_data = time.monotonic()
        self.listener.run_changed(view)

    # -- waiting for a run ---------------------------------------------------------------

    async def until(
        self, view: RunView, condition: Condition, timeout: float | None = None, *, most: float = FAST_POLL
    ) -> bool:
        """Wait until ``condition(view)`` holds as the follower reads the run; False after ``timeout``.

        The run is followed in a hurry meanwhile (after 5 ms, doubling up to
        ``most``), the others at their usual pace; every change seen on the
        way is announced to the listener as usual.
        """
        if condition(view):
            return True
        self.ensure_running()
        waiter = _Waiter(view, condition, asyncio.get_running_loop().create_future(), max(HURRY_FIRST, most))
        self._waiters.append(waiter)
        self._hurry = HURRY_FIRST
        self._wake.set()
        try:
            await asyncio.wait_for(waiter.done, timeout)
        except asyncio.TimeoutError:
            return False
        finally:
            self._waiters.remove(waiter)
        return True

    def _settle(self) -> None:
        """Tell every waiter whose condition now holds."""
        for waiter in self._waiters:
            if waiter.done.done():
                continue
            try:
                if waiter.condition(waiter.view):
                    waiter.done.set_result(None)
            except Exception as error:  # the waiter learns of it, the follower goes on
                waiter.done.set_exception(error)
