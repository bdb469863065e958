"""The job agent: one small detached process per run that owns the trainer.

Started by a server as ``python -m arena_ls.lifecycle.agent RUN_DIR``, it
outlives the server and the editor. It captures the trainer's output into
the run folder, records every status change atomically in ``state.json``,
runs the stop protocol when a ``stop.json`` request appears, detects stalls,
classifies failures and, for ``train`` jobs, relaunches a crashed trainer
from its last checkpoint (the watchdog). It imports nothing of the LSP
stack, so it starts fast and stays small.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import attrs

from arena_ls import platform
from arena_ls.lifecycle import supervisor_events as events
from arena_ls.lifecycle.agent_power import GATE_POLL_SECONDS, PowerGuard
from arena_ls.lifecycle.attempts import AttemptLoop, Outcome, RunRecord
from arena_ls.lifecycle.events import Checkpoint, EventParser, Progress, is_bad_loss
from arena_ls.lifecycle.exec_check import verify_exec
from arena_ls.lifecycle.failure import classify
from arena_ls.lifecycle.folderwatch import FolderWatch, Gone, Moved
from arena_ls.lifecycle.outputlog import ARENA, OutputWriter, Pump
from arena_ls.lifecycle.power import PowerAction
from arena_ls.lifecycle.relaunch_gate import GateRules, describe_wait, relaunch_gate
from arena_ls.lifecycle.reserve import StateReserve
from arena_ls.lifecycle.rundir import (
    CheckpointRecord,
    Failure,
    RunDir,
    RunState,
    StateBusy,
    StateFolder,
)
from arena_ls.lifecycle.runlock import RunLock
from arena_ls.lifecycle.savedfiles import find_saved_file
from arena_ls.lifecycle.states import RunStatus
from arena_ls.lifecycle.statewriter import StateWriter
from arena_ls.lifecycle.supervisor_events import SupervisorEvent
from arena_ls.lifecycle.trainer_start import (
    EarlyLaunch,
    start_captured,
    trainer_argv,
    trainer_env,
)
from arena_ls.lifecycle.watchdog import Relaunch, Watchdog, WatchdogRules

log = logging.getLogger("arena_ls.agent")

FULL_SCAN_BYTES = 1 << 16
FULL_SCAN_SECONDS = 0.25
"""Chunks over ``FULL_SCAN_BYTES`` (a flood) get every line parsed at most this often.

In between, ``EventParser.parse_flood`` finds every announcement but looks
for progress only at the chunk's end: progress is a level, its latest value
wins, and a flood must not cost a decode and a regex per line."""
POLL_SECONDS = 0.05
PROGRESS_WRITE_INTERVAL = 1.0
BOTH_SIGNAL_DELAY = 5.0
TAIL_LINES = 200
TAIL_BYTES = 16384
"""Of each chunk, the end kept raw for ``tail_lines`` (decoded only when a failure is judged)."""
GPU_RELEASE_TIMEOUT = 10.0
FINAL_WRITE_TIMEOUT = 30.0
"""How long the agent keeps retrying its final state once its run folder is gone.

While the folder exists the final state is retried for as long as it takes (a
full disk): the agent never exits with the outcome unwritten (contract 7.1)."""
LAUNCH_FAILED_EXIT = 3
"""The agent's exit code when the run cannot be recorded at all (the server answers 1009)."""
NO_STOP_SIGNAL = (
    "no stop signal on this system (a console event would reach every process of "
    "the trainer's group): the stop file is the request"
)
FIRST_WRITE_PATIENCE = 20.0
"""How long the first state write retries sharing violations before the run counts as unrecordable."""


@attrs.define
class StopPlan:
    """The stop protocol in progress."""

    kill: bool
    grace_seconds: float
    requested_at: float
    stage: str | None = None
    signal_due_at: float | None = None
    by_battery: bool = False
    """The power rule's stop (``stoppedBy`` ``battery``), not a client's."""


class Agent:
    """Runs one run to its end. See the module docstring."""

    def __init__(self, run_dir: RunDir, early: EarlyLaunch | None = None) -> None:
        self.run_dir = run_dir
        self.early = early
        """The first attempt's trainer, when ``launch`` started it before loading the agent."""
        self.spec = run_dir.read_spec()
        self.folder = StateFolder(run_dir.path.parent.parent)
        self.state = RunState(run_id=self.spec.run_id, job_id=self.spec.job_id)
        self.state.agent_pid = os.getpid()
        self.state.agent_create_time = platform.process_identity(os.getpid())
        if early is not None:  # launch recorded the run (or 0): the agent's writes continue from it
            self.state.generation = early.generation
        self.state.argv = trainer_argv(self.spec.argv, self.spec.resume_args, self.spec.resumed_from_step)
        if self.spec.resumed_from_step is not None:
            try:
                previous = self.spec.job_checkpoint or self.folder.job_checkpoint(self.spec.job_id)
            except StateBusy:  # held open (Windows): the next checkpoint is recorded anyway
                previous = None
            if previous is not None and previous.step == self.spec.resumed_from_step:
                self.state.last_checkpoint = previous
        self.attempt_announced = False
        """The current attempt announced progress or a checkpoint (a refusal to resume did not)."""
        self.folder_watch = FolderWatch(run_dir.path)
        self._told_stop_file = str(run_dir.stop_file)
        """``ARENA_STOP_FILE`` as the trainer got it (a moved folder leaves it at the old path)."""
        """The run folder's place: moved, the agent follows it; deleted, it stops the trainer."""
        self.output = early.writer if early is not None else OutputWriter(run_dir.path)
        self.pumps: list[Pump] = []
        self.parser = EventParser.for_patterns(self.spec.progress_pattern, self.spec.checkpoint_pattern)
        self.lock = threading.RLock()
        self.wake = threading.Event()
        self.tail_chunks: deque[tuple[bytes, bool]] = deque(maxlen=TAIL_LINES)
        """The trainer's latest output as (piece, starts mid-line), newest last."""
        self.stop_plan: StopPlan | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.last_progress_at = time.monotonic()
        self.last_progress_write = 0.0
        self.last_full_scan = 0.0
        self.nan_evidence: str | None = None
        self.disk_evidence: str | None = None
        self.seen_write_failures = 0
        self.reserve = StateReserve(run_dir.path)
        self.writer = StateWriter(
            run_dir, self.folder, self.state, self.lock, self.tell, self._write_failed, self.reserve
        )
        self.record = RunRecord(self.spec, self.state, self.lock, self.tell, self.writer.request)
        """The run's state and ``arena`` lines as the attempt loop (``attempts``) changes them."""
        self.power = PowerGuard(self.spec.power, self.tell)
        self._watchdog = Watchdog(
            WatchdogRules.for_job(
                kind=self.spec.kind,
                resume_args=self.spec.resume_args,
                max_restarts=self.spec.max_restarts,
                backoff_seconds=self.spec.backoff_seconds,
            )
        )
        self._launched_from = self.spec.resumed_from_step

    # -- state ---------------------------------------------------------------------------

    def _move(self, target: RunStatus) -> None:
        """Change the status; the writer records it (a failing write never aborts the run)."""
        self.record.move(target)

    def _save(self) -> None:
        """Ask the writer to record the state; never writes on the calling thread (a pump's, say)."""
        self.writer.request()

    def _write_failed(self, error: Exception) -> None:
        """The writer's report of a failed write (it retries): a lack of space is ``disk-full`` at once."""
        if isinstance(error, OSError):
            with self.lock:
                self._disk_trouble(f"state.json could not be written: {error}", error)

    def _disk_trouble(self, evidence: str, error: OSError | None) -> None:
        """A write failed: with no space left, the run reports ``disk-full`` at once (in memory first)."""
        if error is None or error.errno not in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return
        if self.disk_evidence is None:
            self.disk_evidence = evidence
            self.warn(f"{evidence}; the trainer keeps running")
        if self.state.failure is None:
            self.state.failure = Failure("disk-full", self.disk_evidence)

    def _check_writes(self) -> None:
        """Notice failed log writes; clear ``disk-full`` once every line and the state are written."""
        failures = self.output.write_failures
        if failures > self.seen_write_failures:
            self.seen_write_failures = failures
            error = self.output.last_error
            with self.lock:
                self._disk_trouble(f"output.log could not be written: {error}", error)
            self.writer.request()
        if self.disk_evidence is None or self.output.unwritten_lines or self.writer.failing:
            return
        with self.lock:
            failure = self.state.failure
            if failure is not None and failure.kind == "disk-full":
                self.state.failure = None
            self.disk_evidence = None
        self.say("writes succeed again: the disk has space")
        self.writer.request()

    def tell(self, event: SupervisorEvent) -> None:
        """A record of the supervisor's own, in the run's log (stream ``arena``, ``supervisor_events``).

        Not part of ``tail``: failure evidence comes from the trainer's own lines.
        """
        self.output.append_line(ARENA, event.encode_lines())

    def say(self, text: str) -> None:
        """A note of the supervisor's own (no reader acts on it)."""
        self.tell(events.note(text))

    def warn(self, text: str) -> None:
        """A warning of the supervisor's own (``warning: ...``)."""
        self.tell(events.warning(text))

    # -- main loop -----------------------------------------------------------------------

    def run(self) -> int:
        """Run the trainer (and its relaunches) to a final status; return 0.

        A run whose first state cannot be written (a full state folder) is
        not started: its trainer is killed and the agent exits with
        ``LAUNCH_FAILED_EXIT``, which the server answers with 1009.
        """
        try:
            self._write_first_state()
        except OSError as error:
            return self._abandon(error)
        self._reserve_final_state()
        try:
            AttemptLoop(self.record, self).run()
            return 0
        finally:
            if not self.writer.close_final(1.0 if self.folder_watch.gone else FINAL_WRITE_TIMEOUT):
                log.error("the final state could not be written: the run folder is gone")
            self.output.close()
            self.power.close()
            RunLock(self.folder).release(self.spec.run_id)

    def _write_first_state(self) -> None:
        """Record the run before anything else; a file held open (Windows) is waited out, not fatal.

        Unless ``launch`` recorded it already (running, with the trainer's pid): a ``starting``
        written now would take the run back, so the agent's first write is the one that
        adopts that trainer (``_launch``), with the same facts and the next generation.
        """
        if self.early is not None and self.early.generation:
            return
        try:
            self.run_dir.write_state(self.state)
        except OSError as error:
            if not platform.is_sharing_violation(error):
                raise
            self.warn(f"could not record the run's state ({error}); retrying")
            platform.retry_sharing(lambda: self.run_dir.write_state(self.state), FIRST_WRITE_PATIENCE)
            self.say("the run's state is recorded again")

    def _reserve_final_state(self) -> None:
        """Reserve the space of the final state, so that a full disk cannot lose the outcome."""
        try:
            self.reserve.make()
        except OSError as error:
            self.warn(f"could not reserve space for the run's final state ({error}); "
                      "should the disk fill, the outcome is written once space returns")  # fmt: skip

    def _abandon(self, error: OSError) -> int:
        """The run cannot be recorded: stop the early trainer, say why on stderr, free the lock."""
        where = self.run_dir.path
        print(f"arena agent: cannot record the run in {where}: {error}", file=sys.stderr, flush=True)
        early, self.early = self.early, None
        if early is not None and early.process is not None:
            platform.kill_tree(early.process.pid, timeout=5.0, own_child=True)
            early.process.wait()
        self.output.close()
        RunLock(self.folder).release(self.spec.run_id)
        return LAUNCH_FAILED_EXIT

    def _checkpoint_step(self) -> int | None:
        return self.record.checkpoint_step()

    # -- the Trainer of the attempt loop (``attempts.Trainer``): a process tree here ------------

    @property
    def launched_from(self) -> int | None:
        return self._launched_from

    @property
    def announced(self) -> bool:
        return self.attempt_announced

    def launch(self, step: int | None) -> Outcome:
        self._launched_from = step
        return self._attempt(step)

    def tail(self) -> list[str]:
        return self.tail_lines()

    def saved_file(self) -> str | None:
        return find_saved_file(Path(self.spec.cwd), self.spec.checkpoint_paths)

    def watchdog(self) -> Watchdog:
        return self._watchdog

    def decided(self, watchdog: Watchdog) -> None:
        """The watchdog lives as long as the agent: nothing to record."""

    def relaunching(self, relaunch: Relaunch) -> None:
        """Nothing to record before ``restarting``: the relaunch's step is in the loop's record."""

    def sit_out(self, relaunch: Relaunch) -> bool:
        """The backoff, then the relaunch gate (contract 7.3); False when a stop cancels the relaunch."""
        self._confirm_gpu_released()
        if not Watchdog.sit_out(relaunch, self):
            self.say("stop requested during the backoff: relaunch cancelled")
            with self.lock:
                self.state.stopped_by = None
            return False
        return self._await_relaunch_gate()

    def resume_paused(self) -> tuple[bool, int | None]:
        return self._resume_on_ac()

    def _attempt(self, step: int | None) -> RunStatus | None:
        """Launch once and wait; a final status, or None when the trainer crashed (the watchdog decides)."""
        argv = trainer_argv(self.spec.argv, self.spec.resume_args, step)
        if not self._launch(argv):
            return RunStatus.CRASHED
        returncode = self._supervise()
        return self._judge(returncode)

    def _launch(self, argv: list[str]) -> bool:
        early, self.early = self.early, None
        try:
            if early is not None:  # launch said "starting" and started its pumps
                process = self._adopt_early(early)
                argv = early.argv
                self.pumps = early.pumps
            else:
                self.tell(events.starting(self.spec.job_id, argv))
                env = trainer_env(self.spec.env, self.spec.run_id, self.spec.job_id, self.run_dir.stop_file)
                self._told_stop_file = str(self.run_dir.stop_file)
                verify_exec(self.spec.exec_check)  # right before the exec: the gated paths again
                process, self.pumps = start_captured(argv, Path(self.spec.cwd), env, self.output)
        except OSError as error:
            self.say(f"could not start {argv[0]!r}: {error}")
            with self.lock:
                self.state.failure = Failure("error", f"could not start {argv[0]!r}: {error}")
                self.state.exit_code = None
                self.state.ended_at = time.time()
            return False
        with self.lock:  # held until any early stop is taken over: the writer's first snapshot has it
            stage = early.hand_over() if early is not None else None
            if early is not None:  # the launcher may have recorded a stop since the agent was made
                self.state.generation = max(self.state.generation, early.generation)
            self.process = process
            self.state.pid = process.pid
            self.state.pid_create_time = platform.process_identity(process.pid)
            self.state.argv = argv
            self.state.started_at = self.state.started_at or (early.started_at if early else time.time())
            self.state.exit_code = None
            self.state.signal = None
            self.state.failure = None
            self.state.next_launch_at = None
            self.last_progress_at = time.monotonic()
            self.attempt_announced = False
            self._move(RunStatus.RUNNING)
            self._continue_early_stop(stage)
        return True

    def _continue_early_stop(self, stage: str | None) -> None:
        """Go on with a stop that ``launch`` began while the agent was loading (its first ``stage`` taken)."""
        if stage is None:
            return
        self._check_stop_request()  # the plan, ``stopping``, and who asked
        plan = self.stop_plan
        if plan is None:
            return
        plan.stage = stage
        if stage == "kill":
            self.say("killing the process tree")
            return
        if stage == "file" and platform.cooperative_signal_name() is None:
            if self.spec.stop_method != "file":
                self.say(NO_STOP_SIGNAL)
        elif stage == "file" and self.spec.stop_method == "both":
            plan.signal_due_at = time.monotonic() + min(BOTH_SIGNAL_DELAY, plan.grace_seconds / 4)
        what = "created the stop file" if stage == "file" else "sent the stop signal"
        self.say(f"{what}; waiting up to {plan.grace_seconds:g}s")

    def _adopt_early(self, early: EarlyLaunch) -> subprocess.Popen[bytes]:
        """The trainer ``launch`` started (its argv is the spec's, as the first attempt's is)."""
        if early.argv != trainer_argv(self.spec.argv, self.spec.resume_args, self.spec.resumed_from_step):
            log.warning("the early launch ran %s, not what the spec says", early.argv)
        if early.error is not None:
            raise early.error
        assert early.process is not None
        return early.process

    def _supervise(self) -> int:
        """Capture output and watch for stop requests until the trainer exits."""
        process = self.process
        assert process is not None and process.stdout is not None and process.stderr is not None
        for pump in self.pumps:
            pump.attach(self._on_output)
        waiter = threading.Thread(target=self._wait_exit, args=(process,), daemon=True)
        waiter.start()
        while process.poll() is None:
            self.wake.wait(POLL_SECONDS)
            self.wake.clear()
            self._check_stop_request()
            self._check_power()
            self._advance_stop()
            self._check_stall()
            self._check_writes()
            self._check_folder(process)
            platform.reap_adopted(keep=process.pid)
        returncode = process.wait()
        survivors = platform.kill_group_remnants(process.pid)
        if survivors:
            self.say(f"processes {survivors} of the trainer's tree could not be killed")
        for pump in self.pumps:
            pump.join(timeout=10.0)
        return returncode

    def _check_folder(self, process: subprocess.Popen[bytes]) -> None:
        """Follow a moved run folder; stop the trainer when the folder was deleted (``folderwatch``)."""
        change = self.folder_watch.check(time.monotonic())
        if isinstance(change, Moved):
            with self.lock:
                self.run_dir.path = change.path
                self.folder.root = change.path.parent.parent
            self.say(f"the run folder moved to {change.path}: following it there")
            self.writer.request()
        elif isinstance(change, Gone) and self.stop_plan is None:
            print(
                f"arena agent: the run folder {change.path} is gone; nobody can follow run "
                f"{self.spec.run_id} any more: stopping its trainer (pid {process.pid}) cooperatively",
                file=sys.stderr,
                flush=True,
            )
            self.stop_plan = plan = StopPlan(
                kill=False, grace_seconds=self.spec.grace_seconds, requested_at=time.monotonic()
            )
            plan.stage = "signal" if platform.send_cooperative_signal(process.pid) else "file"
            with self.lock:
                if self.state.status is RunStatus.RUNNING:
                    self._move(RunStatus.STOPPING)

    def _wait_exit(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        self.wake.set()

    def _on_output(self, complete: bytes, update: bytes) -> None:
        """What a pump wrote: scan finished lines and in-place updates for events."""
        if complete:
            self._scan(complete)
        if update:
            self._scan_update(update)

    def _scan(self, complete: bytes) -> None:
        if len(complete) <= TAIL_BYTES:
            self.tail_chunks.append((complete, False))
        else:  # a flood: keep only the chunk's end, without decoding it
            self.tail_chunks.append((complete[-TAIL_BYTES:], True))
        now = time.monotonic()
        if len(complete) <= FULL_SCAN_BYTES or now - self.last_full_scan >= FULL_SCAN_SECONDS:
            self.last_full_scan = now
            events = self.parser.parse_chunk(complete)
        else:
            events = self.parser.parse_flood(complete)
        for event in events:
            if isinstance(event, Checkpoint):
                self._on_checkpoint(event)
            elif isinstance(event, Progress):
                self._on_progress(event)

    def _scan_update(self, update: bytes) -> None:
        """An unfinished line redrawn in place (a progress bar): its latest state."""
        segments = [part for part in update.split(b"\r") if part.strip()]
        if segments:
            event = self.parser.parse_safely(segments[-1].decode("utf-8", "replace"))
            if isinstance(event, Progress):
                self._on_progress(event)

    def tail_lines(self) -> list[str]:
        """The trainer's last ``TAIL_LINES`` lines, decoded (the failure's evidence)."""
        lines: list[str] = []
        for piece, cut in reversed(self.tail_chunks):
            raws = piece.splitlines()[1:] if cut else piece.splitlines()
            wanted = TAIL_LINES - len(lines)
            lines[:0] = [raw.decode("utf-8", "replace") for raw in raws[-wanted:]]
            if len(lines) >= TAIL_LINES:
                break
        return lines

    def _on_checkpoint(self, event: Checkpoint) -> None:
        record = CheckpointRecord(step=event.step, path=event.path, at=time.time(), run_id=self.spec.run_id)
        with self.lock:
            self.attempt_announced = True
            self.state.last_checkpoint = record
            self.state.step = max(self.state.step or 0, event.step)
        self.writer.request(job_checkpoint=(self.spec.job_id, record))

    def _on_progress(self, event: Progress) -> None:
        now = time.monotonic()
        with self.lock:
            self.attempt_announced = True
            self.last_progress_at = now
            self.state.step = event.step
            self.state.total_steps = event.total or self.state.total_steps
            self.state.loss = event.loss
            if is_bad_loss(event.loss) and self.nan_evidence is None:
                self.nan_evidence = f"loss is {event.loss} at step {event.step}"
                self.warn(self.nan_evidence)
            if self.state.stalled:
                self.state.stalled = False
                self.say("progress resumed")
                self._save()
            elif now - self.last_progress_write >= PROGRESS_WRITE_INTERVAL:
                self.last_progress_write = now
                self._save()

    # -- stall ---------------------------------------------------------------------------

    def _check_stall(self) -> None:
        if self.spec.kind != "train":
            return
        with self.lock:
            if self.state.stalled or self.state.status is not RunStatus.RUNNING:
                return
            silent = time.monotonic() - self.last_progress_at
            if silent < self.spec.stall_seconds:
                return
            self.state.stalled = True
            self.warn(f"no progress announced for {silent:.0f}s; the trainer may be stalled")
            self._save()

    # -- power and the relaunch gate (contract 7.3) ----------------------------------------

    def _check_power(self) -> None:
        """The power rule: on battery past its grace, a cooperative stop (``stoppedBy`` ``battery``)."""
        if self.power.poll(time.monotonic()) is not PowerAction.STOP or self.stop_plan is not None:
            return
        self.stop_plan = StopPlan(
            kill=False, grace_seconds=self.spec.grace_seconds, requested_at=time.monotonic(), by_battery=True
        )
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self._move(RunStatus.STOPPING)

    def _resume_on_ac(self) -> tuple[bool, int | None]:
        """After a battery stop: wait (``restarting``, ``waitingFor`` power) and resume; False: stay stopped.

        Only a ``train`` run with a known checkpoint resumes: anything else
        would start from scratch, which the power rule never does.
        """
        step = self._checkpoint_step()
        if self.spec.kind != "train" or step is None or not self.spec.resume_args:
            self.say("stopped for battery; not started again: no checkpoint to resume from")
            return False, None
        with self.lock:
            self._move(RunStatus.RESTARTING)
        self.stop_plan = None
        with contextlib.suppress(OSError):
            self.run_dir.stop_file.unlink(missing_ok=True)
        rules = self.power.gate_rules(need_power=True)
        if rules is not None and not self._await_relaunch_gate(rules):
            return False, None
        with self.lock:
            self.state.stopped_by = None
        self.say(
            f"power is back: starting {self.spec.job_id} again, resuming from step {step} (power.resumeOnAc)"
        )
        return True, step

    def _await_relaunch_gate(self, rules: GateRules | None = None) -> bool:
        """Hold a relaunch while a pre-flight check fails (``waitingFor``); False when a stop arrives."""
        rules = rules or self.power.gate_rules()
        if rules is None:
            return True
        said = None
        while True:
            failing = relaunch_gate(rules, self.power.reading())
            with self.lock:
                changed = self.state.waiting_for != (failing or None)
                self.state.waiting_for = failing or None
            if changed:
                self._save()
            if not failing:
                if said is not None:
                    self.say("pre-flight passes again: relaunching")
                return True
            if describe_wait(failing) != said:
                said = describe_wait(failing)
                self.say(said)
            if self.stop_requested():
                self.say("stop requested while the relaunch waited: relaunch cancelled")
                return False
            self.pause(GATE_POLL_SECONDS)

    # -- stop protocol -------------------------------------------------------------------

    def _check_stop_request(self) -> None:
        if self.stop_plan is not None:
            request = self.run_dir.read_stop_request()
            if request and request.get("kill") and not self.stop_plan.kill:
                self.stop_plan.kill = True  # an escalation: kill now
            return
        request = self.run_dir.read_stop_request()
        if request is None:
            return
        grace = request.get("graceSeconds")
        if not isinstance(grace, (int, float)) or isinstance(grace, bool) or grace < 0:
            grace = self.spec.grace_seconds
        self.stop_plan = StopPlan(
            kill=bool(request.get("kill")), grace_seconds=float(grace), requested_at=time.monotonic()
        )
        by = request.get("by") or "a client"
        self.say(f"stop requested by {by}" + (" (kill)" if self.stop_plan.kill else ""))
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self._move(RunStatus.STOPPING)

    def _advance_stop(self) -> None:
        plan = self.stop_plan
        process = self.process
        if plan is None or process is None or process.poll() is not None:
            return
        if plan.kill or time.monotonic() - plan.requested_at >= plan.grace_seconds:
            self._kill_now(plan, process)
            return
        if plan.stage is None:
            self._begin_cooperative(plan, process)
        elif plan.signal_due_at is not None and time.monotonic() >= plan.signal_due_at:
            plan.signal_due_at = None
            if platform.send_cooperative_signal(process.pid):
                plan.stage = "signal"
                self.say("stop file not honoured yet: sent the stop signal")

    def _begin_cooperative(self, plan: StopPlan, process: subprocess.Popen[bytes]) -> None:
        method = self.spec.stop_method
        if method == "file" and self._moved():
            method = "both"  # the trainer polls the stop file's old path: the signal reaches it too
        if platform.cooperative_signal_name() is None:  # Windows: the stop file is the only request
            self._create_stop_file(plan)
            if method != "file":
                self.say(NO_STOP_SIGNAL)
            return
        if method in ("file", "both") and not self._create_stop_file(plan):
            self.say("sending the stop signal instead")  # a full disk: go on to the signal at once
            method = "signal"
        if method == "both":
            plan.signal_due_at = time.monotonic() + min(BOTH_SIGNAL_DELAY, plan.grace_seconds / 4)
        if method == "signal":
            platform.send_cooperative_signal(process.pid)
            plan.stage = "signal"
            self.say(f"sent the stop signal; waiting up to {plan.grace_seconds:g}s")

    def _moved(self) -> bool:
        """The run folder is no longer where the trainer was told its stop file is."""
        return str(self.run_dir.stop_file) != self._told_stop_file

    def _create_stop_file(self, plan: StopPlan) -> bool:
        """Create ``ARENA_STOP_FILE``; False when it could not be (the grace window still ends in a kill)."""
        plan.stage = "file"
        try:
            self.run_dir.stop_file.write_text("stop requested\n")
        except OSError as error:
            self.warn(f"could not create the stop file: {error}")
            return False
        self.say(f"created the stop file; waiting up to {plan.grace_seconds:g}s")
        return True

    def _kill_now(self, plan: StopPlan, process: subprocess.Popen[bytes]) -> None:
        if plan.stage == "kill":
            return
        if not plan.kill:
            self.say(f"grace window of {plan.grace_seconds:g}s elapsed: killing the process tree")
        else:
            self.say("killing the process tree")
        plan.stage = "kill"
        survivors = platform.kill_tree(process.pid, timeout=5.0, own_child=True)
        if survivors:
            self.say(f"could not kill processes {survivors}")

    # -- the end of an attempt -----------------------------------------------------------

    def _judge(self, returncode: int) -> RunStatus | None:
        exit_code, signal_name = platform.describe_signal(returncode)
        with self.lock:
            self.state.exit_code = exit_code
            self.state.signal = signal_name
            self.state.ended_at = time.time()
        self.tell(events.exited(exit_code, signal_name))
        if self.stop_plan is not None:
            battery = self.stop_plan.by_battery
            by = "battery" if battery else (self.stop_plan.stage or "file")
            with self.lock:
                self.state.stopped_by = by
            self.tell(events.stopped(by))
            return RunStatus.RESTARTING if battery and self.power.resume_after_stop() else RunStatus.STOPPED
        if returncode == 0:
            return RunStatus.SUCCEEDED
        failure = classify(
            exit_code=exit_code,
            signal_name=signal_name,
            tail=self.tail_lines(),
            nan_evidence=self.nan_evidence,
            kind=self.spec.kind,
        )
        self.record.crashed(failure, exit_code if signal_name is None else returncode, signal_name)
        return None

    # -- WatchdogHost: the clock and the files the watchdog's backoff uses -----------------

    def monotonic(self) -> float:
        return time.monotonic()

    def pause(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()  # set when the trainer exited: left set, every wait would return at once
        self._check_writes()

    def stop_requested(self) -> bool:
        return self.run_dir.read_stop_request() is not None

    def _confirm_gpu_released(self) -> None:
        """Where GPUs can be read, check that the old trainer no longer holds GPU memory."""
        pid = self.state.pid
        if not pid:
            return
        from arena_ls.health import SystemHardware, wait_gpu_released

        hardware = SystemHardware()
        try:
            held = wait_gpu_released(hardware, {pid}, GPU_RELEASE_TIMEOUT)
        except Exception as error:  # a GPU probe must never stop a relaunch
            log.warning("GPU release check failed: %s", error)
            return
        finally:
            hardware.close()
        for held_pid, megabytes in held:
            self.warn(f"process {held_pid} of the old trainer still holds {megabytes} MB of GPU memory")


def main(argv: list[str] | None = None, early: EarlyLaunch | None = None) -> int:
    """Run the agent for RUN_DIR; ``early`` is a trainer ``launch`` already started."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s agent %(message)s")
    if len(args) != 1:
        print("usage: python -m arena_ls.lifecycle.agent RUN_DIR", file=sys.stderr)
        return 2
    run_dir = RunDir(Path(args[0]).resolve())
    platform.become_subreaper()
    gc.freeze()  # what is loaded by now lives as long as the agent: keep it out of every collection
    agent = Agent(run_dir, early)
    try:
        return agent.run()
    except Exception:
        log.exception("the agent failed")
        try:
            agent.writer.close(timeout=5.0)
            with agent.lock:
                agent.state.failure = Failure("error", "the job agent failed; see agent.log")
                if not agent.state.status.is_final:
                    agent.state.status = RunStatus.LOST
                with contextlib.suppress(OSError):
                    agent.run_dir.write_state(agent.state)
        finally:
            RunLock(agent.folder).release(agent.spec.run_id)
        return 1


if __name__ == "__main__":
    sys.exit(main())
