"""The local trainer's stall watch: the policy (``stall``) fed with this machine's readings.

Part of ``LocalTrainer``: the supervise loop calls ``poll`` every turn and
the pumps call ``progress`` (both under the run's lock). The readings are
cheap and rate-limited: the tree's CPU time once after each burst of
progress (at most every ``CPU_SAMPLE_SECONDS``), the GPUs only once the run
has been silent for half its threshold (every ``GPU_SAMPLE_SECONDS``). The
evidence that takes time (``py-spy dump``) is taken on a worker thread, so
that a stop request is still served meanwhile; ``poll`` hands the finding
over once it is complete.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import attrs
import psutil

from arena_ls import platform
from arena_ls.agent.stall import (
    RestartFacts,
    StallClock,
    StallDecision,
    StallRules,
    WindowUse,
    judge,
)
from arena_ls.agent.stall_probe import StackDump, dump_stacks, find_py_spy, gpu_busy

log = logging.getLogger("arena_ls.agent")

CPU_SAMPLE_SECONDS = 1.0
TREE_SECONDS = 10.0
"""How often the trainer's process tree is listed again for its CPU time."""
GPU_SAMPLE_SECONDS = 2.0
LAST_LINES = 5
"""The trainer's last lines that go with the evidence."""


@attrs.frozen
class StallFinding:
    """A judged stall with its evidence, ready to be said and acted on."""

    decision: StallDecision
    stack: StackDump | None
    """None: no stack was taken (a judgement that only confirms the trainer still works)."""
    last_lines: tuple[str, ...]
    repeat: bool = False
    """A later judgement of a stall already said (a trainer still working): a note, nothing else."""

    def evidence(self) -> str:
        """``failure.evidence`` of ``stalled``: the verdict, the stack on one line or why none."""
        text = self.decision.message
        if self.stack is not None:
            compact = self.stack.compact()
            if compact:
                text += f"; stack (py-spy, pid {self.stack.pid}): {compact}"
            else:
                text += f"; no stack: {self.stack.why_none or 'py-spy printed no frame'}"
        if self.last_lines:
            text += f"; last line: {self.last_lines[-1][:200]}"
        return text

    def log_lines(self) -> list[str]:
        """The notes that follow the warning in the run's log: the stack (or why none), the last lines."""
        lines: list[str] = []
        if self.stack is not None:
            if self.stack.lines:
                lines.append(f"stacks of the trainer (py-spy dump --pid {self.stack.pid}):")
                lines.extend(f"  {line}" for line in self.stack.lines)
            else:
                lines.append(f"no stack of the trainer: {self.stack.why_none}")
            if self.last_lines:
                lines.append("the trainer's last lines:")
                lines.extend(f"  {line[:500]}" for line in self.last_lines)
        return lines


class TreeCpu:
    """The CPU time of the trainer's process tree, cheaply: the tree's members are listed (a walk
    of every process) at most every ``TREE_SECONDS``, and each member's times read in between.

    A child born since the last listing is missed at the window's start and counted at its end
    (``fresh``): the growth can only be overstated, which never leads to a restart.
    """

    def __init__(self) -> None:
        self._members: list[psutil.Process] = []
        self._root: int | None = None
        self._listed_at = float("-inf")

    def seconds(self, pid: int, now: float, *, fresh: bool = False) -> float | None:
        """CPU seconds (user + system, reaped children included) the tree of ``pid`` used so far."""
        if fresh or pid != self._root or now - self._listed_at >= TREE_SECONDS or not self._members:
            self._list(pid, now)
        total, alive = 0.0, False
        for member in self._members:
            try:
                times = member.cpu_times()
            except psutil.Error:
                continue
            alive = alive or member.pid == pid
            total += times.user + times.system
            total += getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)
        return total if alive else None

    def _list(self, pid: int, now: float) -> None:
        self._root, self._listed_at = pid, now
        members = []
        for member_pid in platform.tree_pids(pid):
            try:
                members.append(psutil.Process(member_pid))
            except psutil.Error:
                continue
        self._members = members


class StallWatch:
    """One run's stall watch across its attempts (see the module docstring)."""

    def __init__(
        self,
        rules: StallRules,
        lock: threading.RLock,
        hardware: Callable[[], Any],
        tail: Callable[[], list[str]],
        restart_facts: Callable[[], RestartFacts],
        now: float,
        *,
        dump: Callable[[list[int]], StackDump] | None = None,
    ) -> None:
        self.rules = rules
        self.lock = lock
        self.hardware = hardware
        """The agent's ``Hardware`` (the real machine, or its server's fake), made on first use."""
        self.tail = tail
        self.restart_facts = restart_facts
        """Where a restart would resume from, asked under the lock when a stall is judged."""
        self.clock = StallClock(rules, now)
        self.tree_cpu = TreeCpu()
        self._dump = dump or (lambda pids: dump_stacks(pids, find_py_spy()))
        self._window_start: tuple[float, float | None] | None = None
        """(when, the tree's CPU seconds then): the start of the silent window."""
        self._window_wanted = True
        self._last_cpu_sample = float("-inf")
        self._next_gpu_sample = 0.0
        self._gpu_peak: int | None = None
        self._gpu_note: str | None = None
        self._epoch = 0
        """Counts progress: a finding taken before the latest progress is dropped."""
        self._pending: tuple[int, threading.Thread | None, list[StallFinding]] | None = None
        """A judgement's finding: (epoch, the worker taking its evidence or None, the finding once made)."""

    # -- fed by the trainer ------------------------------------------------------------------

    def attempt_started(self, now: float) -> None:
        """A new attempt: its pace is unknown again (under the lock)."""
        self.clock = StallClock(self.rules, now)
        self._reset_window()

    def progress(self, step: int, now: float) -> bool:
        """A progress announcement (under the lock); True when it ends a stall."""
        self._epoch += 1
        self._reset_window()
        return self.clock.progress(step, now)

    def _reset_window(self) -> None:
        self._window_wanted = True
        self._gpu_peak = None
        self._gpu_note = None

    # -- the supervise loop ------------------------------------------------------------------

    def poll(self, now: float, pid: int) -> StallFinding | None:
        """Sample, judge when due, and hand over a finding whose evidence is complete."""
        with self.lock:
            wanted = self._window_wanted
            due = self.clock.due(now)
            half_silent = self.clock.silent(now) >= self.clock.threshold() / 2
        if wanted and now - self._last_cpu_sample >= CPU_SAMPLE_SECONDS:
            self._start_window(now, pid)
        if half_silent and now >= self._next_gpu_sample:
            self._sample_gpu(now, pid)
        if due and self._pending is None:
            self._judge(now, pid)
        return self._finished()

    def _start_window(self, now: float, pid: int) -> None:
        self._last_cpu_sample = now
        cpu = self.tree_cpu.seconds(pid, now)
        with self.lock:
            self._window_wanted = False
            self._window_start = (now, cpu)

    def _sample_gpu(self, now: float, pid: int) -> None:
        self._next_gpu_sample = now + GPU_SAMPLE_SECONDS
        try:
            reading = self.hardware().gpus()
        except Exception as error:  # a reading must never stop a run
            log.warning("GPU reading failed: %s", error)
            self._gpu_note = f"GPU reading failed ({error})"
            return
        busy, note = gpu_busy(reading, set(platform.tree_pids(pid)) | {pid})
        if busy is not None:
            self._gpu_peak = max(busy, self._gpu_peak or 0)
        elif self._gpu_peak is None:
            self._gpu_note = note

    def window_use(self, now: float, pid: int) -> WindowUse:
        """What the trainer used since the window began (now, if no sample was taken yet)."""
        start = self._window_start or (now, None)
        cpu_now = self.tree_cpu.seconds(pid, now, fresh=True)
        used = None if cpu_now is None or start[1] is None else max(0.0, cpu_now - start[1])
        return WindowUse(
            seconds=max(0.0, now - start[0]),
            cpu_seconds=used,
            gpu_busy_percent=self._gpu_peak,
            gpu_note=self._gpu_note,
        )

    def _judge(self, now: float, pid: int) -> None:
        use = self.window_use(now, pid)
        with self.lock:
            silent, threshold = self.clock.silent(now), self.clock.threshold()
            first = not self.clock.stalled
            decision = judge(self.rules, silent, threshold, use, self.restart_facts())
            self.clock.judged(decision, now)
            epoch = self._epoch
        self._window_start = None
        self._window_wanted = True  # a later judgement looks at a fresh window
        self._gpu_peak = None
        if not first and not decision.restart:  # still working, as said: one note, no new evidence
            self._pending = (epoch, None, [StallFinding(decision, None, (), repeat=True)])
            return
        results: list[StallFinding] = []
        last = tuple(self.tail()[-LAST_LINES:])

        def gather() -> None:
            stack = self._dump([pid, *(p for p in platform.tree_pids(pid) if p != pid)])
            results.append(StallFinding(decision, stack, last))

        worker = threading.Thread(target=gather, name="stall-evidence", daemon=True)
        worker.start()
        self._pending = (epoch, worker, results)

    def _finished(self) -> StallFinding | None:
        pending = self._pending
        if pending is None or (pending[1] is not None and pending[1].is_alive()):
            return None
        self._pending = None
        epoch, _, results = pending
        with self.lock:
            current = self._epoch
        if epoch != current or not results:
            return None  # progress came while the evidence was taken: no stall to report
        return results[0]
