"""The local trainer's stop protocol (stop file, signal, grace, kill the tree) and the power rule's stop.

Part of ``LocalTrainer`` (``local_trainer``), moved out of the job agent; the
words it logs are the agent's, unchanged.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from pathlib import Path

import attrs

from arena_ls import platform
from arena_ls.agent import rollback as rollbacks
from arena_ls.agent.agent_power import GATE_POLL_SECONDS, PowerGuard
from arena_ls.agent.ckptverify import DiskLook, Verification, verify
from arena_ls.agent.local.output import STALLED, TrainerOutput
from arena_ls.agent.power import PowerAction
from arena_ls.agent.relaunch_gate import GateRules, describe_wait, relaunch_gate
from arena_ls.run import supervisor_events as events
from arena_ls.run.rundir import CheckpointRecord, Failure, RunDir
from arena_ls.run.states import RunStatus

BOTH_SIGNAL_DELAY = 5.0
NO_STOP_SIGNAL = (
    "no stop signal on this system (a console event would reach every process of "
    "the trainer's group): the stop file is the request"
)


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
    by_stall: bool = False
    """The stall watch's stop (``watchdog.stallAction`` ``restart``): the attempt ends ``stalled``
    and the watchdog relaunches it from its last checkpoint, as after a crash."""


class StopProtocol(TrainerOutput):
    """Stopping the trainer's process tree, asked by a client, the power rule or a deleted folder."""

    run_dir: RunDir
    power: PowerGuard
    stop_plan: StopPlan | None
    process: subprocess.Popen[bytes] | None
    _told_stop_file: str
    """``ARENA_STOP_FILE`` as the trainer got it (a moved folder leaves it at the old path)."""

    wake: threading.Event
    """Set when the trainer exited: a pause ends at once."""
    rollback_plan: rollbacks.Rollback | None
    """The rollback the cooperative stop in progress leads to (``_check_rollback``)."""

    # -- WatchdogHost: the clock and the files the watchdog's backoff uses -----------------

    def monotonic(self) -> float:
        return time.monotonic()

    def pause(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()  # set when the trainer exited: left set, every wait would return at once
        self._check_writes()

    def stop_requested(self) -> bool:
        return self.run_dir.read_stop_request() is not None

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
        rules = self.power.gate_rules(need_power=True)
        with self.lock:  # one write: a client never sees this ``restarting`` without what it waits for
            if rules is not None:
                self.state.waiting_for = relaunch_gate(rules, self.power.reading()) or None
            self._move(RunStatus.RESTARTING)
        self.stop_plan = None
        with contextlib.suppress(OSError):
            self.run_dir.stop_file.unlink(missing_ok=True)
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

    # -- stalls (contract 8.2: ``stall``, ``local_stall``) ------------------------------------

    def _check_stall(self) -> None:
        """Judge a silence past the stall threshold; say the finding with its evidence; act on it."""
        process = self.process
        if self.spec.kind != "train" or process is None:
            return
        with self.lock:
            if self.state.status is not RunStatus.RUNNING:
                return
        finding = self.stall_watch.poll(time.monotonic(), process.pid)
        if finding is None:
            return
        if finding.repeat:
            self.say(f"still silent: {finding.decision.message}")
            return
        with self.lock:
            if self.state.status is not RunStatus.RUNNING or self.stop_plan is not None:
                return
            self.state.stalled = True
            self.state.failure = Failure(STALLED, finding.evidence())
            self.warn(finding.decision.message)
            for line in finding.log_lines():
                self.say(line)
            if finding.decision.restart:
                grace = self.spec.grace_seconds
                self.stop_plan = StopPlan(
                    kill=False, grace_seconds=grace, requested_at=time.monotonic(), by_stall=True
                )
                self._move(RunStatus.STOPPING)
            self._save()

    def _after_stall_stop(self, exit_code: int | None, signal_name: str | None) -> None:
        """The stall watch's stop ended the attempt: ``stalled``, relaunched by the watchdog as a crash."""
        self.stop_plan = None
        with contextlib.suppress(OSError):
            self.run_dir.stop_file.unlink(missing_ok=True)  # or the relaunched trainer stops at once
        with self.lock:
            failure = self.state.failure
            if failure is None or failure.kind != STALLED:
                failure = Failure(STALLED, "stopped after a stall")
            self.state.failure = failure
            self.state.stalled = False
        self.say(f"the stalled trainer ended ({events.code_words(exit_code, signal_name)})")
        self.tell(events.failure(failure.kind, failure.evidence))

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

    def verify(self, ordered: list[CheckpointRecord]) -> Verification:
        """The agent's look at the files (``ckptverify``): a stop request ends a long hash."""
        look = DiskLook(Path(self.spec.cwd), should_stop=self._stop_asked)
        return verify(ordered, look)

    def _stop_asked(self) -> bool:
        return self.run_dir.read_stop_request() is not None

    def _check_rollback(self, process: subprocess.Popen[bytes]) -> None:
        """A loss spike the pumps saw: with ``insights.lossSpikeAction`` ``rollback`` and a verified
        checkpoint far enough before it, a cooperative stop that leads to the rollback (contract 8.2);
        else the reason in the log. The look happens here, on the agent's loop, never on a pump."""
        rules, spike = self.spec.rollback, self.spike_pending
        if rules is None or spike is None or self.stop_plan is not None:
            return
        self.spike_pending = None
        with self.lock:
            done = self.state.rollbacks
        verification = None
        if rollbacks.wants_look(rules, done):
            ordered = self.record.resume_candidates(at_most=rollbacks.bound(rules, spike))
            verification = self.verify(ordered) if ordered else None
        decision = rollbacks.decide(rules, spike, done, verification)
        if isinstance(decision, rollbacks.NoRollback):
            if rules.action == rollbacks.ROLLBACK:
                self.warn(decision.why)
            return
        self.rollback_plan = decision
        self.say(
            f"loss spike at step {spike}: stopping the trainer cooperatively to roll back to step "
            f"{decision.target.step}"
        )
        self.stop_plan = plan = StopPlan(
            kill=False, grace_seconds=self.spec.grace_seconds, requested_at=time.monotonic()
        )
        plan.stage = self._first_stop_stage(process)

    def _stop_unlisted(self, process: subprocess.Popen[bytes], where: Path) -> None:
        """The run folder itself was renamed or moved out of the runs folder (or replaced): no
        server can list the run any more, and its lock would hold the workspace for the trainer's
        whole life. The trainer is stopped cooperatively (it saves its checkpoint), as for a
        deleted folder, and the run ends where its folder now is (issue 39)."""
        if self.stop_plan is not None:
            return
        why = (
            f"the run folder was renamed or replaced: run {self.spec.run_id} is now in {where}, where "
            "no server lists it, and it would lock the workspace: stopping its trainer cooperatively"
        )
        print(f"arena agent: {why} (pid {process.pid})", file=sys.stderr, flush=True)
        self.say(why)
        self._stop_cooperatively(process)

    def _stop_cooperatively(self, process: subprocess.Popen[bytes]) -> None:
        self.stop_plan = plan = StopPlan(
            kill=False, grace_seconds=self.spec.grace_seconds, requested_at=time.monotonic()
        )
        plan.stage = "signal" if platform.send_cooperative_signal(process.pid) else "file"
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self._move(RunStatus.STOPPING)

    def _first_stop_stage(self, process: subprocess.Popen[bytes]) -> str:
        """The cooperative stop's first step for a rollback: the stop file (and the signal when the
        job's ``stop.method`` asks for it)."""
        if self.spec.stop_method in ("signal", "both") and platform.send_cooperative_signal(process.pid):
            return "signal"
        try:
            self.run_dir.stop_file.write_text("rollback\n")
        except OSError:
            return "signal" if platform.send_cooperative_signal(process.pid) else "file"
        return "file"

    def _clear_stop_file(self) -> None:
        """The rollback's stop file goes before the relaunch (the next attempt must not stop at once)."""
        try:
            self.run_dir.stop_file.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            self.warn(f"could not remove the stop file after the rollback's stop: {error}")
