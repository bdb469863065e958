"""The local trainer: the process tree one attempt of a local run launches (``attempts.Trainer``).

Moved out of the job agent (``agent``), which builds one and hands it to the
attempt loop: launching the trainer (or adopting the one ``launch`` started),
the saved-file check, and the end of an attempt judged from its exit. It owns,
rather than inherits, the parts that each keep their own state: what the trainer
printed (``output.TrainerOutput``, with the run's ``Announcements`` handler the
cluster's log copy uses too), the stop protocol and the battery pause
(``stop.StopProtocol``) and the stall watch (``stall.StallWatch``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from arena_ls import platform
from arena_ls.agent import rollback as rollbacks
from arena_ls.agent.agent_power import PowerGuard
from arena_ls.agent.announcements import Announcements
from arena_ls.agent.attempts import Outcome, RunRecord
from arena_ls.agent.ckptverify import DiskLook, Verification
from arena_ls.agent.ckptverify import verify as verify_files
from arena_ls.agent.exec_check import verify_exec
from arena_ls.agent.failure import classify, oom_kills_since
from arena_ls.agent.folderwatch import FolderWatch, Gone, Moved, follows_the_workspace
from arena_ls.agent.local.output import OutputTail, TrainerOutput
from arena_ls.agent.local.stall import StallWatch
from arena_ls.agent.local.stop import StopProtocol
from arena_ls.agent.pumps import Pump
from arena_ls.agent.resume_args import ResumePathUnknown, path_at, resume_env
from arena_ls.agent.savedfiles import find_saved_file
from arena_ls.agent.stall import RestartFacts, StallRules
from arena_ls.agent.statewriter import StateWriter
from arena_ls.agent.trainer_start import (
    EarlyLaunch,
    adopt_early,
    recorded_argv,
    start_captured,
    trainer_argv,
    trainer_env,
)
from arena_ls.agent.watchdog import Relaunch, Watchdog, WatchdogRules
from arena_ls.run import agent_records
from arena_ls.run.outputlog import OutputWriter
from arena_ls.run.rundir import CheckpointRecord, Failure, RunDir
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

log = logging.getLogger("arena_ls.agent")

POLL_SECONDS = 0.05
GPU_RELEASE_TIMEOUT = 10.0


class LocalTrainer:
    """The trainer's process tree on this machine, attempt after attempt (``attempts.Trainer``)."""

    def __init__(
        self,
        run_dir: RunDir,
        folder: StateFolder,
        record: RunRecord,
        writer: StateWriter,
        output: OutputWriter,
        early: EarlyLaunch | None,
        *,
        folder_handle: platform.FolderHandle = -1,
    ) -> None:
        self.run_dir = run_dir
        self.folder = folder
        self.record = record
        self.spec = record.spec
        self.state = record.state
        self.lock = record.lock
        self.writer = writer
        self.output = output
        self.early = early
        """The first attempt's trainer, when ``launch`` started it before loading the agent."""
        self.folder_watch = FolderWatch(run_dir.path, folder_handle)
        """The run folder's place: moved, the agent follows it; deleted, it stops the trainer."""
        # where the trainer was told its stop file is: ``launch``'s path, should the folder have
        # moved while the agent loaded (the agent then works from the new path, the trainer not)
        told = (early.stop_file if early is not None else "") or str(run_dir.stop_file)
        launched_in = Path(told).parent
        self.listed_at = run_dir.path if follows_the_workspace(launched_in, run_dir.path) else launched_in
        """Where a server lists the run: the folder it was launched in, or where a moved workspace
        took it. The run folder anywhere else (renamed, replaced) stops the trainer (issue 39)."""
        if told != str(run_dir.stop_file) and self.listed_at == run_dir.path:
            record.say(f"the run folder moved to {run_dir.path} while the agent loaded: following it there")
        self.pumps: list[Pump] = []
        self.oom_kills_at_launch: int | None = platform.oom_kill_count()
        """The kernel's OOM kills when the attempt started (an early launch's: when the agent loaded)."""
        self.power = PowerGuard(self.spec.power, record.tell)
        self._watchdog = Watchdog(
            WatchdogRules.for_job(
                kind=self.spec.kind,
                resume_args=self.spec.resume_args,
                max_restarts=self.spec.max_restarts,
                backoff_seconds=self.spec.backoff_seconds,
            )
        )
        self._launched_from = self.spec.resumed_from_step
        self.output_tail = OutputTail()
        self.stall_watch = StallWatch(
            StallRules.of(
                self.spec.stall_factor,
                self.spec.stall_min_seconds,
                self.spec.stall_seconds,
                self.spec.stall_action,
            ),
            self.lock,
            self.power.hardware,
            self.output_tail.lines,
            self._restart_facts,
            time.monotonic(),
        )
        self.printed = TrainerOutput(record, writer, output, self.output_tail, self.stall_watch)
        """What the trainer printed: its announcements, the disk's troubles, the loss spikes."""
        self.announcements: Announcements = self.printed.announcements
        self.stop = StopProtocol(
            record,
            run_dir,
            self.power,
            self.stall_watch,
            self.printed,
            self.verify,
            self.printed.check_writes,
            told,
        )

    def _restart_facts(self) -> RestartFacts:
        """Where a stall restart would resume from: the run's checkpoint, else the job's as it began."""
        job = self.spec.job_checkpoint
        known = [
            s for s in (self.record.checkpoint_step(), job.step if job else None, self.spec.resumed_from_step)
        ]
        steps = [step for step in known if step is not None]
        rules = self._watchdog.rules
        return RestartFacts(
            checkpoint=max(steps) if steps else None,
            relaunchable=rules.relaunchable and rules.max_restarts > 0,
        )

    # -- the Trainer of the attempt loop (``attempts.Trainer``): a process tree here ------------

    @property
    def launched_from(self) -> int | None:
        return self._launched_from

    @property
    def announced(self) -> bool:
        return self.announcements.attempt_announced

    def launch(self, step: int | None, path: str | None = None, skip: int = 0) -> Outcome:
        self._launched_from = step
        return self._attempt(step, path, skip)

    def rollback_wanted(self) -> rollbacks.Rollback | None:
        """The rollback the attempt just stopped for (taken: asked once)."""
        plan, self.stop.rollback_plan = self.stop.rollback_plan, None
        return plan

    def tail(self) -> list[str]:
        return self.output_tail.lines()

    def verify(self, ordered: list[CheckpointRecord]) -> Verification:
        """The agent's look at the files (``ckptverify``): a stop request ends a long hash."""
        return verify_files(ordered, DiskLook(Path(self.spec.cwd), should_stop=self.stop.stop_requested))

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
        confirm_gpu_released(self.state.pid, self.record.warn)
        if not Watchdog.sit_out(relaunch, self.stop):
            self.record.say("stop requested during the backoff: relaunch cancelled")
            with self.lock:
                self.state.stopped_by = None
            return False
        return self.stop.await_relaunch_gate()

    def resume_paused(self) -> tuple[bool, int | None]:
        return self.stop.resume_on_ac()

    def _attempt(self, step: int | None, path: str | None = None, skip: int = 0) -> RunStatus | None:
        """Launch once and wait; a final status, or None when the trainer crashed (the watchdog decides)."""
        try:
            argv = trainer_argv(
                self.spec.argv,
                self.spec.resume_args,
                step,
                path if path is not None else self._resume_path(step),
                skip,
            )
        except ResumePathUnknown as unknown:
            return self._no_resume_path(unknown)
        self.printed.new_attempt()
        if not self._launch(argv):
            return RunStatus.CRASHED
        returncode = self._supervise()
        return self._judge(returncode)

    def _resume_path(self, step: int | None) -> str | None:
        """The announced path of the checkpoint at ``step`` (``{path}``): the run's last, else the job's."""
        if step is None:
            return None
        with self.lock:
            return path_at(step, [self.state.last_checkpoint, self.spec.job_checkpoint])

    def _no_resume_path(self, unknown: ResumePathUnknown) -> RunStatus:
        """``{path}`` with no path known: nothing starts (never a trainer told a literal ``{path}``)."""
        self.record.say(str(unknown))
        with self.lock:
            self.state.failure = Failure("resume-unknown", str(unknown))
            self.state.exit_code = None
            self.state.ended_at = time.time()
        return RunStatus.CRASHED

    def _launch(self, argv: list[str]) -> bool:
        early, self.early = self.early, None
        try:
            if early is not None:  # launch said "starting" and started its pumps
                step = self.spec.resumed_from_step
                expected = recorded_argv(self.spec.argv, self.spec.resume_args, step, self._resume_path(step))
                process = adopt_early(early, expected)
                argv = early.argv
                self.pumps = early.pumps
            else:
                self.record.tell(agent_records.starting(self.spec.job_id, argv))
                env = trainer_env(self.spec.env, self.spec.run_id, self.spec.job_id, self.run_dir.stop_file)
                env.update(resume_env(argv, self.spec.argv))
                self.stop.told_stop_file = str(self.run_dir.stop_file)
                verify_exec(self.spec.exec_check)  # right before the exec: the gated paths again
                self.oom_kills_at_launch = platform.oom_kill_count()
                process, self.pumps = start_captured(argv, Path(self.spec.cwd), env, self.output)
        except OSError as error:
            self.record.say(f"could not start {argv[0]!r}: {error}")
            with self.lock:
                self.state.failure = Failure("error", f"could not start {argv[0]!r}: {error}")
                self.state.exit_code = None
                self.state.ended_at = time.time()
            return False
        with self.lock:  # held until any early stop is taken over: the writer's first snapshot has it
            stage = early.hand_over() if early is not None else None
            if early is not None:  # the launcher may have recorded a stop since the agent was made
                self.state.generation = max(self.state.generation, early.generation)
            self.stop.process = process
            self.state.pid = process.pid
            self.state.pid_create_time = platform.process_identity(process.pid)
            self.state.argv = argv
            self.state.started_at = self.state.started_at or (early.started_at if early else time.time())
            self.state.exit_code = None
            self.state.signal = None
            self.state.failure = None
            self.state.next_launch_at = None
            self.stall_watch.attempt_started(time.monotonic())
            self.state.stalled = False
            self.announcements.attempt_announced = False
            self.record.move(RunStatus.RUNNING)
            self.stop.continue_early_stop(stage)
        return True

    def _supervise(self) -> int:
        """Capture output and watch for stop requests until the trainer exits."""
        process = self.stop.process
        assert process is not None and process.stdout is not None and process.stderr is not None
        for pump in self.pumps:
            pump.attach(self.printed.on_output)
        waiter = threading.Thread(target=self._wait_exit, args=(process,), daemon=True)
        waiter.start()
        while process.poll() is None:
            self.stop.wake.wait(POLL_SECONDS)
            self.stop.wake.clear()
            try:
                self.stop.check_stop_request()
                self.stop.check_power()
                self.stop.advance_stop()
                self.stop.check_stall()
                self.stop.check_rollback(process)
                self.printed.check_writes()
            except NotADirectoryError:  # a file put where the run folder was (issue 39): where is it?
                self.folder_watch.check_now()
            self._check_folder(process)
            platform.reap_adopted(keep=process.pid)
        returncode = process.wait()
        survivors = platform.kill_group_remnants(process.pid)
        if survivors:
            self.record.say(f"processes {survivors} of the trainer's tree could not be killed")
        for pump in self.pumps:
            pump.join(timeout=10.0)
        return returncode

    def _check_folder(self, process: subprocess.Popen[bytes]) -> None:
        """Follow a moved run folder; stop the trainer when the folder was deleted (``folderwatch``)."""
        change = self.folder_watch.check(time.monotonic())
        if isinstance(change, Moved) and follows_the_workspace(self.listed_at, change.path):
            with self.lock:
                self.run_dir.path = self.listed_at = change.path
                self.folder.root = change.path.parent.parent
            self.record.say(f"the run folder moved to {change.path}: following it there")
            self.writer.request()
        elif isinstance(change, Moved):
            with self.lock:
                self.run_dir.path = change.path  # its records go on where the folder is now
        elif isinstance(change, Gone) and self.stop.plan is None:
            print(
                f"arena agent: the run folder {change.path} is gone; nobody can follow run "
                f"{self.spec.run_id} any more: stopping its trainer (pid {process.pid}) cooperatively",
                file=sys.stderr,
                flush=True,
            )
            self.stop.stop_cooperatively(process)
        if self.run_dir.path != self.listed_at:
            self.stop.stop_unlisted(process, self.run_dir.path)

    def _wait_exit(self, process: subprocess.Popen[bytes]) -> None:
        process.wait()
        self.stop.wake.set()

    # -- the end of an attempt -----------------------------------------------------------

    def _judge(self, returncode: int) -> RunStatus | None:
        exit_code, signal_name = platform.describe_signal(returncode)
        with self.lock:
            self.state.exit_code = exit_code
            self.state.signal = signal_name
            self.state.ended_at = time.time()
        self.record.tell(agent_records.exited(exit_code, signal_name))
        if self.stop.plan is not None and self.stop.plan.by_stall:
            self.stop.after_stall_stop(exit_code, signal_name)
            return None  # the watchdog relaunches it from its last checkpoint, as after a crash
        if self.stop.plan is not None and self.stop.rollback_plan is not None:
            self.stop.plan = None
            self.stop.clear_stop_file()
            if self.run_dir.read_stop_request() is None:  # a person's stop meanwhile wins
                return RunStatus.RESTARTING
            self.stop.rollback_plan = None
            self.record.say("a stop was asked for during the rollback's stop: the run stops")
            with self.lock:
                self.state.stopped_by = "file"
            self.record.tell(agent_records.stopped("file"))
            return RunStatus.STOPPED
        if self.stop.plan is not None:
            battery = self.stop.plan.by_battery
            by = "battery" if battery else (self.stop.plan.stage or "file")
            with self.lock:
                self.state.stopped_by = by
            self.record.tell(agent_records.stopped(by))
            return RunStatus.RESTARTING if battery and self.power.resume_after_stop() else RunStatus.STOPPED
        if returncode == 0:
            return RunStatus.SUCCEEDED
        failure = classify(
            exit_code=exit_code,
            signal_name=signal_name,
            tail=self.output_tail.lines(),
            nan_evidence=self.announcements.nan_evidence,
            kind=self.spec.kind,
            oom_kills=oom_kills_since(self.oom_kills_at_launch),
        )
        self.record.crashed(failure, exit_code if signal_name is None else returncode, signal_name)
        return None


def confirm_gpu_released(pid: int | None, warn: Callable[[str], None]) -> None:
    """Where GPUs can be read, check that the old trainer no longer holds GPU memory."""
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
        warn(f"process {held_pid} of the old trainer still holds {megabytes} MB of GPU memory")
