"""The agent's one path to ``state.json``: a writer thread of its own, coalescing.

Whoever changes the run's state (the pumps that read the trainer's pipes,
the stop protocol, the watchdog) only asks for a write; the writer thread
snapshots the state under the agent's lock and writes it outside of it.
So a write that is slow (``FlushFileBuffers``/fsync on a busy disk) or that
fails (a sharing violation past its retries on Windows, a full disk) never
blocks or kills a pump: the trainer's pipe keeps being drained. A failed
write is retried with backoff until one succeeds; requests made meanwhile
are folded into it.

The final write (``close_final``) is retried for as long as the agent lives:
a full disk may last hours, and until the outcome is on disk the run must read
``running`` or ``stopping``, never ``lost`` (contract 7.1). Where the usual
write fails, the final state goes into the space reserved at the run's start
(``reserve.StateReserve``), so a full disk does not even delay it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from arena_ls.agent.reserve import StateReserve, write_in_place
from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.atomicfile import json_bytes
from arena_ls.run.rundir import CheckpointRecord, RunDir, RunState, write_json_atomic
from arena_ls.run.state_folder import MAX_JOB_PATHS, StateFolder

log = logging.getLogger("arena_ls.agent")

RETRY_FIRST_SECONDS = 0.05
RETRY_MOST_SECONDS = 2.0
IN_PLACE_FIT = 4096
"""What a final state written in place is cut to (its failure evidence first): one block of most
file systems, which the last ``state.json`` (1-2 KB) holds already."""


class StateWriter:
    """Writes ``state`` (guarded by ``lock``) to ``run_dir`` whenever asked, on its own thread."""

    def __init__(
        self,
        run_dir: RunDir,
        folder: StateFolder,
        state: RunState,
        lock: threading.RLock,
        report: Callable[[AgentRecord], None],
        on_failure: Callable[[Exception], None] | None = None,
        reserve: StateReserve | None = None,
    ) -> None:
        self._run_dir = run_dir
        self._folder = folder
        self._state = state
        self._state_lock = lock
        self._report = report
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._requested = 0
        self._written = 0
        self._checkpoints: list[tuple[str, CheckpointRecord]] = []
        """Every checkpoint announced since the last write, in order: a writer that lags (a slow
        disk, a loaded machine) records each in the job's history, not only the newest (issue 36:
        three saves in one write left the record with the last one, a torn file, and no fallback)."""
        self._closing = False
        self._final = False
        self._reserve = reserve
        self.reserve_used = False
        """The final state went into the reserved space (the disk was full)."""
        self.in_place = False
        """The final state went into ``state.json``'s own blocks (full since the start: no reserve)."""
        self._observer: Callable[[Any], None] | None = None
        self.keep_history = 8
        """``checkpoint.history``: how many announcements the job's record keeps (the agent sets it)."""
        self._failing = False
        self.failures = 0
        """Writes that failed (each was retried)."""
        self._thread = threading.Thread(target=self._run, name="state-writer", daemon=True)
        self._thread.start()

    @classmethod
    def reserving(
        cls,
        run_dir: RunDir,
        folder: StateFolder,
        state: RunState,
        lock: threading.RLock,
        say: Callable[[AgentRecord], None],
    ) -> StateWriter:
        """A writer whose final state has its space reserved now, at the run's start (contract 7.1).

        For an agent that has no trainer of its own to start first (the
        cluster agent): the reserve is made here; where it cannot be (a full
        disk already), ``say`` tells the run's log, and ``close_final`` waits
        for space instead, however long."""
        reserve = StateReserve(run_dir.path)
        try:
            reserve.make()
        except OSError as error:
            say(
                agent_records.warning(
                    f"could not reserve space for the run's final state ({error}); "
                    "should the disk fill, the outcome is written once space returns"
                )
            )
        return cls(run_dir, folder, state, lock, say, reserve=reserve)

    def observe_with(self, observer: Callable[[Any], None]) -> None:
        """Hand ``observer`` every state this writer writes (its JSON payload), on the writer's thread.

        For the notifier (contract 8.3): it sees each state as it is recorded, and
        must return at once (it queues). Its failure is logged, never a failed write."""
        self._observer = observer

    def report_failures_to(self, on_failure: Callable[[Exception], None]) -> None:
        """Tell ``on_failure`` of every failed write from now on (in place of the constructor's).

        For a reader built after the writer: the local trainer's ``disk-full``
        rule, whose run record already writes through this writer."""
        self._on_failure = on_failure

    @property
    def failing(self) -> bool:
        """True from a failed write until a write succeeds again."""
        return self._failing

    def request(self, job_checkpoint: tuple[str, CheckpointRecord] | None = None) -> None:
        """Ask for the state to be written (and a job's checkpoint record); returns at once."""
        with self._cond:
            self._requested += 1
            if job_checkpoint is not None:
                self._checkpoints.append(job_checkpoint)
                # a writer that fails for hours: the record keeps no more than these anyway
                del self._checkpoints[:-MAX_JOB_PATHS]
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Write now and wait until the state as of this call is on disk; False on timeout."""
        with self._cond:
            self._requested += 1
            target = self._requested
            self._cond.notify_all()
            return self._cond.wait_for(lambda: self._written >= target, timeout)

    def close(self, timeout: float) -> bool:
        """Write what is pending, then stop the thread; False when the last write did not succeed."""
        written = self.flush(timeout)
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        return written

    def close_final(self, patience_without_folder: float) -> bool:
        """Write the final state, retrying for as long as it takes, then stop the thread.

        Only a run folder that is gone (deleted, unmounted) ends the wait, after
        ``patience_without_folder`` seconds: nothing written there can be read.
        Where the usual write fails, the reserve is written instead.
        """
        with self._cond:
            self._final = True
        gone_since: float | None = None
        while not self.flush(timeout=1.0):
            if self._run_dir.path.exists():
                gone_since = None
                continue
            gone_since = gone_since if gone_since is not None else time.monotonic()
            if time.monotonic() - gone_since >= patience_without_folder:
                self.close(timeout=0.0)
                return False
        if self._reserve is not None and not self.reserve_used:
            self._reserve.discard()
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=5.0)  # all is written: the thread ends at once, unless a request came since
        return True

    def _run(self) -> None:
        delay = RETRY_FIRST_SECONDS
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._requested > self._written or self._closing)
                if self._closing and self._requested <= self._written:
                    return
                target, checkpoints, self._checkpoints = self._requested, self._checkpoints, []
            try:
                self._write(checkpoints)
            except Exception as error:  # the writer outlives every failure; the run goes on
                self._failed(error, checkpoints)
                with self._cond:
                    if self._closing:
                        return
                    self._cond.wait(delay)
                delay = min(delay * 2, RETRY_MOST_SECONDS)
                continue
            delay = RETRY_FIRST_SECONDS
            if self._failing:
                self._failing = False
                self._report(agent_records.note("the run's state is recorded again"))
            with self._cond:
                self._written = max(self._written, target)
                self._cond.notify_all()

    def _write(self, checkpoints: list[tuple[str, CheckpointRecord]]) -> None:
        with self._state_lock:
            payload: Any = self._run_dir.state_payload(self._state)
        if self._observer is not None:
            try:
                self._observer(payload)
            except Exception:  # an observer never costs the run its state
                log.exception("the state's observer failed")
        while checkpoints:  # each recorded once, oldest first, even when a later one fails
            self._record_job_checkpoint(checkpoints[0])
            del checkpoints[0]
        try:
            write_json_atomic(self._run_dir.state_path, payload)
        except OSError as error:
            if not self._final:
                raise
            if self.reserve_used or self._reserve is None or not self._reserve.ready:
                self._write_in_place(payload, error)
                return
            self._reserve.write_over(self._run_dir.state_path, _fitting(payload, self._reserve.size))
            self.reserve_used = True
            log.warning("the final state was written into its reserved space (%s)", error)

    def _write_in_place(self, payload: Any, error: OSError) -> None:
        """No reserve (the disk was full when the run started): the final state goes into the
        blocks ``state.json`` holds already (``reserve.write_in_place``), else the error stands
        and the write is retried until space returns."""
        try:
            write_in_place(self._run_dir.state_path, _fitting(payload, IN_PLACE_FIT))
        except OSError as in_place:
            log.warning("the final state could not be written in place either (%s)", in_place)
            raise error from in_place
        self.in_place = True
        log.warning("the final state was written in place of the last one (%s)", error)

    def _record_job_checkpoint(self, checkpoint: tuple[str, CheckpointRecord]) -> None:
        """The job's record before the run's state: a server that sees the new state (a stop's
        ``stopped``) may start the next run at once, and that run resumes from the job's record,
        which must know the stop's checkpoint by then. A final write on a full disk goes on
        without it (the state has its reserve, the record has none): the record then lags, and a
        start from it is refused by the trainer (a step mismatch), never an overwrite."""
        try:
            self._folder.record_job_checkpoint(*checkpoint, keep=self.keep_history)
        except OSError as error:
            if not self._final or self._reserve is None or not self._reserve.ready:
                raise
            log.warning("the job's checkpoint record could not be written (%s); the state goes first", error)

    def _failed(self, error: Exception, checkpoints: list[tuple[str, CheckpointRecord]]) -> None:
        self.failures += 1
        with self._cond:
            self._checkpoints[:0] = checkpoints  # not yet recorded: before those announced since
            del self._checkpoints[:-MAX_JOB_PATHS]
        log.warning("could not write the run's state: %s; retrying", error)
        if self._on_failure is not None:
            self._on_failure(error)
        if not self._failing:
            self._failing = True
            self._report(agent_records.warning(f"could not record the run's state ({error}); retrying"))


def _fitting(payload: Any, size: int) -> bytes:
    """The state's bytes, its failure evidence cut until they fit ``size`` (the reserve)."""
    data = json_bytes(payload)
    failure = payload.get("failure") if isinstance(payload, dict) else None
    while len(data) > size and isinstance(failure, dict) and len(failure.get("evidence") or "") > 200:
        evidence = str(failure["evidence"])
        failure["evidence"] = evidence[: max(200, len(evidence) - (len(data) - size) - 64)] + " …"
        data = json_bytes(payload)
    return data
