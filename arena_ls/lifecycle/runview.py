"""A server's view of one run, rebuilt from the run's folder at any time.

Any server process builds the same view from disk: the agent's state file,
the captured output and its index. The view follows the files (new lines,
status changes) and decides when a run whose agent died is ``lost``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
import subprocess
import time
from collections import deque
from typing import Any

import attrs

from arena_ls import platform
from arena_ls.lifecycle.capture import Cursor, LogLine, OutputReader
from arena_ls.lifecycle.events import Checkpoint, EventParser, Progress
from arena_ls.lifecycle.progress import ProgressTracker
from arena_ls.lifecycle.rundir import (
    CheckpointRecord,
    CorruptState,
    Failure,
    RunDir,
    RunSpec,
    RunState,
    StateBusy,
    StateFolder,
    unstructure,
)
from arena_ls.lifecycle.runlock import RunLock
from arena_ls.lifecycle.states import RunStatus
from arena_ls.timeutil import iso_utc

log = logging.getLogger(__name__)

RING_LINES = 2000
"""Lines of each run kept in memory; the files on disk keep everything."""
MAX_LINES_PER_POLL = 5000
BACKLOG_JUMP_BYTES = 64 << 10
"""Past this much unread output, the live view skips to the tail (the disk keeps all).

About what one poll can pass on under the ``arena/log`` rate bound: reading
more would only be dropped by the batcher, and under a flood it takes the
CPU that the trainer and its agent need."""
JUMP_KEEP_LINES = 200
"""Lines read before the end after a jump (the status tail shows 50)."""
AGENT_START_GRACE = 30.0
DISK_FULL_BYTES = 64 << 10
"""A filesystem with less free space than this counts as full: the run's writes fail."""
METRIC_POINTS_CAP = 10_000


@attrs.define
class MetricPoint:
    step: int
    loss: float | None
    lr: float | None
    at: float


class RunView:
    """What a server knows of one run."""

    def __init__(self, run_dir: RunDir, spec: RunSpec, agent: subprocess.Popen[bytes] | None = None):
        self.run_dir = run_dir
        self.spec = spec
        self.agent = agent
        self.state: RunState | None = None
        self.state_signature: tuple[int, int, int, int] | None = None
        self.busy = False
        """state.json was held open by another process at the last read (Windows): retried, not damage."""
        self.reader = OutputReader(run_dir.path)
        self.cursor: Cursor = self.reader.start()
        self.ring: deque[LogLine] = deque(maxlen=RING_LINES)
        self.progress = ProgressTracker()
        self.parser = EventParser.for_patterns(spec.progress_pattern, spec.checkpoint_pattern)
        self.unsummarised = 0
        """Lines jumped over that the client has not been told about yet."""
        self.problem: str | None = None
        self.damage: str | None = None
        """What is wrong with the run's files (``failure.kind`` ``damaged``), or None."""
        self.placeholder = False
        """``spec`` is made up from the folder's name: its own spec.json cannot be read."""
        self.damaged_but_live = False
        """Damaged, yet its agent lives (it keeps its recorded status until it ends)."""
        self.disk_full: str | None = None
        """Set while the run's filesystem has no space left (``failure.kind`` ``disk-full``)."""
        self.agent_exit: int | None = None
        """The exit code of the agent this server spawned, once it has ended."""
        self.notified: Any = None
        """The state as last announced to the client (see ``Supervisor.notify_if_changed``)."""

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def status(self) -> RunStatus:
        if self.damage is not None and not self.damaged_but_live:
            return RunStatus.LOST  # its files are damaged and no agent of it lives
        return self.state.status if self.state is not None else RunStatus.STARTING

    @property
    def is_final(self) -> bool:
        return self.status.is_final

    # -- following the files -----------------------------------------------------------

    def refresh_state(self, *, force: bool = False) -> None:
        """Re-read state.json if it changed (``Supervisor.notify_if_changed`` tells the client).

        A change is seen by the file's signature (mtime, size, inode, ctime),
        not by its mtime alone, which FAT32/exFAT keep to 2 s; ``force``
        re-reads anyway. A state older than the one held (its ``generation``)
        is ignored.
        """
        signature = self.run_dir.state_signature()
        if signature == self.state_signature and not force:
            return
        try:
            state = self.run_dir.read_state()
        except FileNotFoundError:
            return
        except StateBusy as error:
            log.info("run %s: %s; read again later", self.run_id, error)
            self.busy = True
            return
        except CorruptState as error:
            if self.problem is None:
                log.warning("run %s: %s", self.run_id, error)
            self.problem = str(error)
            if self.state is None:  # nothing known of it: the run is damaged
                self.damage = self.damage or _name_file(str(error), self.run_dir)
            return
        if self.problem is not None and self.damage == _name_file(self.problem, self.run_dir):
            self.damage = None  # rewritten whole since (by its agent)
        self.problem = None
        self.busy = False
        self.state_signature = signature
        if self.state is None or state.generation >= self.state.generation or state.generation == 0:
            self.state = state

    def mark_damaged(self, evidence: str) -> None:
        """The run's files are damaged: keep the first evidence."""
        if self.damage is None:
            self.damage = evidence
            self._check_damaged_live()

    def retry_damaged(self) -> None:
        """Look at a damaged run's files again: damage repaired since (a state rewritten) clears it."""
        self.refresh_state(force=True)
        self._check_damaged_live()

    def _check_damaged_live(self) -> None:
        state = self.state
        self.damaged_but_live = (
            state is not None and not state.status.is_final and self.agent_alive()
        )

    def snapshot(self) -> Any:
        """What a client is told about: the recorded state and the status."""
        state = unstructure(self.state) if self.state is not None else None
        return (self.status.value, state, self.damage, self.disk_full)

    def start_live_at_tail(self) -> None:
        """Adopting: fill the ring with the last lines, follow from there.

        A damaged index is read from its start, as far as it goes."""
        try:
            self.cursor = self.reader.tail_cursor(RING_LINES)
        except (OSError, ValueError, struct.error):
            self.cursor = self.reader.start()
        self.read_new_lines(notify=False)

    def read_new_lines(self, *, notify: bool = True) -> list[LogLine]:
        """New complete lines since the last call (bounded per call)."""
        backlog = self._backlog_bytes()
        if backlog > BACKLOG_JUMP_BYTES:
            try:
                jump = self.reader.tail_cursor(JUMP_KEEP_LINES)
            except (OSError, ValueError, struct.error):
                jump = self.cursor  # damaged: read on from here, as far as it goes
            if jump.seq > self.cursor.seq:
                if notify:
                    self.unsummarised += jump.seq - self.cursor.seq
                self.cursor = jump
        page = self.reader.read(self.cursor, MAX_LINES_PER_POLL)
        if page.reset is not None:
            log.warning("run %s: %s", self.run_id, page.reset)
        if page.damage is not None:
            self.mark_damaged(page.damage)
        self.cursor = page.cursor
        for line in page.lines:
            self.ring.append(line)
            self._scan(line)
        for update in page.updates:
            self._scan(update)
        return page.lines if notify else []

    def take_unsummarised(self) -> int:
        """Lines skipped since the last call, for the client's summary line."""
        skipped, self.unsummarised = self.unsummarised, 0
        return skipped

    def _backlog_bytes(self) -> int:
        try:
            return os.stat(self.run_dir.log_path).st_size - self.cursor.offset
        except OSError:
            return 0

    def _scan(self, line: LogLine) -> None:
        if line.stream == "arena":
            if line.text.startswith("starting "):
                self.progress.reset_speed()
            return
        event = self.parser.parse(line.text)
        if isinstance(event, Progress):
            self.progress.update(event.step, event.total, event.loss, event.lr, line.at)

    # -- liveness --------------------------------------------------------------------------

    def reap_agent(self) -> None:
        """Collect our agent's exit status once it has ended, so no zombie of ours lingers."""
        if self.agent is not None and (code := self.agent.poll()) is not None:
            self.agent_exit = code
            self.agent = None

    def agent_alive(self) -> bool:
        if self.agent is not None and self.agent.poll() is None:
            return True
        state = self.state
        if state is None:
            return False
        return platform.is_same_process(state.agent_pid, state.agent_create_time)

    def trainer_alive(self) -> bool:
        state = self.state
        return state is not None and platform.is_same_process(state.pid, state.pid_create_time)

    def check_lost(self, folder: StateFolder) -> bool:
        """Mark an unfinished run whose agent is gone as ``lost``; True when it did.

        The trainer dies with its agent (Linux: PDEATHSIG; Windows: the job
        object); should any of its tree survive, it is killed here, so no
        trainer runs unmanaged. Only one server records the verdict.
        """
        if self.is_final or self.damage is not None:
            return False  # a damaged run is never written to: its files stay as found
        if self.state is None:
            if time.time() - self.spec.created_at < AGENT_START_GRACE or self.agent_alive():
                return False
            self.state = RunState(run_id=self.run_id, job_id=self.spec.job_id)
        elif self.agent_alive():
            return False
        self.refresh_state(force=True)  # the agent may have written its final state as it exited
        if self.is_final or self.busy:
            return False
        if not _claim(self.run_dir, "verdict"):
            return False
        evidence = "the job agent is gone and recorded no exit status"
        pid = self.state.pid if self.state is not None else None
        if pid and self.trainer_alive():
            platform.kill_tree(pid)
            evidence += "; the trainer's remaining processes were killed"
        if pid and platform.process_identity(pid) is None:
            # The group id is still the trainer's only while no new process has its pid.
            platform.kill_group_remnants(pid)
        state = self.state
        assert state is not None
        state.status = RunStatus.LOST
        state.failure = Failure("error", evidence)
        state.ended_at = state.ended_at or time.time()
        try:
            self.run_dir.write_state(state)
            self.state_signature = self.run_dir.state_signature()
        except OSError as error:  # a full disk: the verdict stays in memory, the lock goes anyway
            log.warning("run %s: could not record that it was lost: %s", self.run_id, error)
        RunLock(folder).release(self.run_id)
        return True

    def check_disk(self) -> None:
        """While the run is live: is its filesystem full? (``failure.kind`` ``disk-full`` meanwhile.)"""
        if self.is_final:
            self.disk_full = None
            return
        try:
            free = shutil.disk_usage(self.run_dir.path).free
        except OSError:
            return
        if free >= DISK_FULL_BYTES:
            self.disk_full = None
        elif self.disk_full is None:
            self.disk_full = (
                f"the filesystem of {self.run_dir.path} has {free} bytes free: the run's writes fail "
                "(No space left on device); the trainer keeps running"
            )

    # -- wire ------------------------------------------------------------------------------

    def last_checkpoint_event(self) -> Checkpoint | None:
        state = self.state
        if state is None or state.last_checkpoint is None:
            return None
        return Checkpoint(state.last_checkpoint.step, state.last_checkpoint.path)

    def _failure_wire(self, state: RunState) -> dict[str, str] | None:
        if self.damage is not None:
            return {"kind": "damaged", "evidence": self.damage}
        if state.failure is not None:
            return {"kind": state.failure.kind, "evidence": state.failure.evidence}
        if self.disk_full is not None and not self.is_final:
            return {"kind": "disk-full", "evidence": self.disk_full}
        return None

    def tail(self, count: int = 20) -> list[dict[str, Any]]:
        return [line.to_wire() for line in list(self.ring)[-count:]]

    def to_wire(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """The contract's ``RunInfo``: every field present, null included."""
        state = self.state or RunState(run_id=self.run_id, job_id=self.spec.job_id)
        progress = self.progress
        checkpoint = state.last_checkpoint
        live = self.status in (RunStatus.RUNNING, RunStatus.STOPPING)
        info: dict[str, Any] = {
            "runId": self.run_id,
            "jobId": self.spec.job_id,
            "status": self.status.value,
            "pid": state.pid,
            "agentPid": state.agent_pid if state.agent_pid else (self.agent.pid if self.agent else None),
            "startedAt": iso_utc(state.started_at),
            "endedAt": iso_utc(state.ended_at) if self.is_final else None,
            "exitCode": state.exit_code,
            "signal": state.signal,
            "stoppedBy": state.stopped_by,
            "failure": self._failure_wire(state),
            "restarts": state.restarts,
            "step": _latest_step(progress.step if progress.step is not None else state.step, checkpoint),
            "totalSteps": progress.total if progress.total is not None else state.total_steps,
            "loss": _finite(progress.loss if progress.loss is not None else state.loss),
            "stepsPerSecond": _round(progress.steps_per_second) if live else None,
            "etaSeconds": _round(progress.eta_seconds) if live else None,
            "stalled": bool(state.stalled),
            "lastCheckpoint": {"step": checkpoint.step, "path": checkpoint.path, "at": iso_utc(checkpoint.at)}
            if checkpoint
            else None,
            "logPath": str(self.run_dir.log_path),
            "jobName": self.spec.job_name,
            "resumedFromStep": self.spec.resumed_from_step,
            "argv": state.argv or self.spec.argv,
            "gpuMemoryMb": None,
            "gpuUtilization": None,
        }
        if extra:
            info.update(extra)
        return info


def _name_file(error: str, run_dir: RunDir) -> str:
    """Evidence that names the file relative to the run folder (``state.json: ...``)."""
    prefix = f"{run_dir.path}{os.sep}"
    return error[len(prefix) :] if error.startswith(prefix) else error


def _latest_step(step: int | None, checkpoint: CheckpointRecord | None) -> int | None:
    """The step reached: progress is announced every few steps, a checkpoint names the step it
    saved, so the checkpoint's step counts when it is the later one."""
    if checkpoint is None:
        return step
    return checkpoint.step if step is None else max(step, checkpoint.step)


def _claim(run_dir: RunDir, what: str) -> bool:
    """An exclusive, once-only claim on a run among every server of the workspace."""
    try:
        fd = os.open(run_dir.path / f".{what}.claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with contextlib.suppress(OSError):
        os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _finite(value: float | None) -> float | None:
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return value


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
