"""The local trainer's stop protocol (stop file, signal, grace, kill the tree) and the power rule's stop.

Owned by ``LocalTrainer`` (``trainer``), which hands it what it needs (``StopProtocol``'s
arguments): the run's record, its folder, the power guard, the stall watch, where a loss spike
is waiting (``SpikeSource``), how to verify checkpoints and what to do between waits; the
trainer gives it each attempt's process (``process``). Its own state is the stop in progress
(``plan``) and the rollback it leads to.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import attrs

from arena_ls import platform
from arena_ls.agent import rollback as rollbacks
from arena_ls.agent.agent_power import GATE_POLL_SECONDS, PowerGuard
from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.ckptverify import Verification
from arena_ls.agent.local.output import STALLED
from arena_ls.agent.local.stall import StallWatch
from arena_ls.agent.power import PowerAction
from arena_ls.agent.relaunch_gate import GateRules, describe_wait, relaunch_gate
from arena_ls.run import agent_records
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


class SpikeSource(Protocol):
    """Where a loss spike waits for the stop protocol (the trainer's output, set on a pump's thread)."""

    spike_pending: int | None


class StopProtocol:
    """Stopping the trainer's process tree, asked by a client, the power rule or a deleted folder."""

    def __init__(
        self,
        record: RunRecord,
        run_dir: RunDir,
        power: PowerGuard,
        stall_watch: StallWatch,
        spikes: SpikeSource,
        verify: Callable[[list[CheckpointRecord]], Verification],
        between_waits: Callable[[], None],
        told_stop_file: str,
    ) -> None:
        self.record = record
        self.spec = record.spec
        self.state = record.state
        self.lock = record.lock
        self.run_dir = run_dir
        self.power = power
        self.stall_watch = stall_watch
        self.spikes = spikes
        self.verify = verify
        """The agent's look at the checkpoint files before a rollback (``ckptverify``)."""
        self.between_waits = between_waits
        """What a pause keeps up while it waits (the output's disk check)."""
        self.told_stop_file = told_stop_file
        """``ARENA_STOP_FILE`` as the trainer got it (a moved folder leaves it at the old path)."""
        self.plan: StopPlan | None = None
        """The stop in progress."""
        self.process: subprocess.Popen[bytes] | None = None
        """The current attempt's trainer (the trainer sets it at each launch)."""
        self.wake = threading.Event()
        """Set when the trainer exited: a pause ends at once."""
        self.rollback_plan: rollbacks.Rollback | None = None
        """The rollback the cooperative stop in progress leads to (``check_rollback``)."""

    # -- WatchdogHost: the clock and the files the watchdog's backoff uses -----------------

    def monotonic(self) -> float:
        return time.monotonic()

    def pause(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()  # set when the trainer exited: left set, every wait would return at once
        self.between_waits()

    def stop_requested(self) -> bool:
        return self.run_dir.read_stop_request() is not None

    def continue_early_stop(self, stage: str | None) -> None:
        """Go on with a stop that ``launch`` began while the agent was loading (its first ``stage`` taken)."""
        if stage is None:
            return
        self.check_stop_request()  # the plan, ``stopping``, and who asked
        plan = self.plan
        if plan is None:
            return
        plan.stage = stage
        if stage == "kill":
            self.record.say("killing the process tree")
            return
        if stage == "file" and platform.cooperative_signal_name() is None:
            if self.spec.stop_method != "file":
                self.record.say(NO_STOP_SIGNAL)
        elif stage == "file" and self.spec.stop_method == "both":
            plan.signal_due_at = time.monotonic() + min(BOTH_SIGNAL_DELAY, plan.grace_seconds / 4)
        what = "created the stop file" if stage == "file" else "sent the stop signal"
        self.record.say(f"{what}; waiting up to {plan.grace_seconds:g}s")

    # -- power and the relaunch gate (contract 7.3) ----------------------------------------

    def check_power(self) -> None:
        """The power rule: on battery past its grace, a cooperative stop (``stoppedBy`` ``battery``)."""
        if self.power.poll(time.monotonic()) is not PowerAction.STOP or self.plan is not None:
            return
        self.plan = StopPlan(
            kill=False, grace_seconds=self.spec.grace_seconds, requested_at=time.monotonic(), by_battery=True
        )
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self.record.move(RunStatus.STOPPING)

    def resume_on_ac(self) -> tuple[bool, int | None]:
        """After a battery stop: wait (``restarting``, ``waitingFor`` power) and resume; False: stay stopped.

        Only a ``train`` run with a known checkpoint resumes: anything else
        would start from scratch, which the power rule never does.
        """
        step = self.record.checkpoint_step()
        if self.spec.kind != "train" or step is None or not self.spec.resume_args:
            self.record.say("stopped for battery; not started again: no checkpoint to resume from")
            return False, None
        rules = self.power.gate_rules(need_power=True)
        with self.lock:  # one write: a client never sees this ``restarting`` without what it waits for
            if rules is not None:
                self.state.waiting_for = relaunch_gate(rules, self.power.reading()) or None
            self.record.move(RunStatus.RESTARTING)
        self.plan = None
        with contextlib.suppress(OSError):
            self.run_dir.stop_file.unlink(missing_ok=True)
        if rules is not None and not self.await_relaunch_gate(rules):
            return False, None
        with self.lock:
            self.state.stopped_by = None
        self.record.say(
            f"power is back: starting {self.spec.job_id} again, resuming from step {step} (power.resumeOnAc)"
        )
        return True, step

    def await_relaunch_gate(self, rules: GateRules | None = None) -> bool:
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
                self.record.save()
            if not failing:
                if said is not None:
                    self.record.say("pre-flight passes again: relaunching")
                return True
            if describe_wait(failing) != said:
                said = describe_wait(failing)
                self.record.say(said)
            if self.stop_requested():
                self.record.say("stop requested while the relaunch waited: relaunch cancelled")
                return False
            self.pause(GATE_POLL_SECONDS)

    # -- stalls (contract 8.2: ``stall``, ``local_stall``) ------------------------------------

    def check_stall(self) -> None:
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
            self.record.say(f"still silent: {finding.decision.message}")
            return
        with self.lock:
            if self.state.status is not RunStatus.RUNNING or self.plan is not None:
                return
            self.state.stalled = True
            self.state.failure = Failure(STALLED, finding.evidence())
            self.record.warn(finding.decision.message)
            for line in finding.log_lines():
                self.record.say(line)
            if finding.decision.restart:
                grace = self.spec.grace_seconds
                self.plan = StopPlan(
                    kill=False, grace_seconds=grace, requested_at=time.monotonic(), by_stall=True
                )
                self.record.move(RunStatus.STOPPING)
            self.record.save()

    def after_stall_stop(self, exit_code: int | None, signal_name: str | None) -> None:
        """The stall watch's stop ended the attempt: ``stalled``, relaunched by the watchdog as a crash."""
        self.plan = None
        with contextlib.suppress(OSError):
            self.run_dir.stop_file.unlink(missing_ok=True)  # or the relaunched trainer stops at once
        with self.lock:
            failure = self.state.failure
            if failure is None or failure.kind != STALLED:
                failure = Failure(STALLED, "stopped after a stall")
            self.state.failure = failure
            self.state.stalled = False
        self.record.say(f"the stalled trainer ended ({agent_records.code_words(exit_code, signal_name)})")
        self.record.tell(agent_records.failure(failure.kind, failure.evidence))

    # -- stop protocol -------------------------------------------------------------------

    def check_stop_request(self) -> None:
        if self.plan is not None:
            request = self.run_dir.read_stop_request()
            if request and request.get("kill") and not self.plan.kill:
                self.plan.kill = True  # an escalation: kill now
            return
        request = self.run_dir.read_stop_request()
        if request is None:
            return
        grace = request.get("graceSeconds")
        if not isinstance(grace, (int, float)) or isinstance(grace, bool) or grace < 0:
            grace = self.spec.grace_seconds
        self.plan = StopPlan(
            kill=bool(request.get("kill")), grace_seconds=float(grace), requested_at=time.monotonic()
        )
        by = request.get("by") or "a client"
        self.record.say(f"stop requested by {by}" + (" (kill)" if self.plan.kill else ""))
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self.record.move(RunStatus.STOPPING)

    def advance_stop(self) -> None:
        plan = self.plan
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
                self.record.say("stop file not honoured yet: sent the stop signal")

    def _begin_cooperative(self, plan: StopPlan, process: subprocess.Popen[bytes]) -> None:
        method = self.spec.stop_method
        if method == "file" and self._moved():
            method = "both"  # the trainer polls the stop file's old path: the signal reaches it too
        if platform.cooperative_signal_name() is None:  # Windows: the stop file is the only request
            self._create_stop_file(plan)
            if method != "file":
                self.record.say(NO_STOP_SIGNAL)
            return
        if method in ("file", "both") and not self._create_stop_file(plan):
            self.record.say("sending the stop signal instead")  # a full disk: go on to the signal at once
            method = "signal"
        if method == "both":
            plan.signal_due_at = time.monotonic() + min(BOTH_SIGNAL_DELAY, plan.grace_seconds / 4)
        if method == "signal":
            platform.send_cooperative_signal(process.pid)
            plan.stage = "signal"
            self.record.say(f"sent the stop signal; waiting up to {plan.grace_seconds:g}s")

    def _moved(self) -> bool:
        """The run folder is no longer where the trainer was told its stop file is."""
        return str(self.run_dir.stop_file) != self.told_stop_file

    def _create_stop_file(self, plan: StopPlan) -> bool:
        """Create ``ARENA_STOP_FILE``; False when it could not be (the grace window still ends in a kill)."""
        plan.stage = "file"
        try:
            self.run_dir.stop_file.write_text("stop requested\n")
        except OSError as error:
            self.record.warn(f"could not create the stop file: {error}")
            return False
        self.record.say(f"created the stop file; waiting up to {plan.grace_seconds:g}s")
        return True

    def _kill_now(self, plan: StopPlan, process: subprocess.Popen[bytes]) -> None:
        if plan.stage == "kill":
            return
        if not plan.kill:
            self.record.say(f"grace window of {plan.grace_seconds:g}s elapsed: killing the process tree")
        else:
            self.record.say("killing the process tree")
        plan.stage = "kill"
        survivors = platform.kill_tree(process.pid, timeout=5.0, own_child=True)
        if survivors:
            self.record.say(f"could not kill processes {survivors}")

    def check_rollback(self, process: subprocess.Popen[bytes]) -> None:
        """A loss spike the pumps saw: with ``insights.lossSpikeAction`` ``rollback`` and a verified
        checkpoint far enough before it, a cooperative stop that leads to the rollback (contract 8.2);
        else the reason in the log. The look happens here, on the agent's loop, never on a pump."""
        rules, spike = self.spec.rollback, self.spikes.spike_pending
        if rules is None or spike is None or self.plan is not None:
            return
        self.spikes.spike_pending = None
        with self.lock:
            done = self.state.rollbacks
        verification = None
        if rollbacks.wants_look(rules, done):
            ordered = self.record.resume_candidates(at_most=rollbacks.bound(rules, spike))
            verification = self.verify(ordered) if ordered else None
        decision = rollbacks.decide(rules, spike, done, verification)
        if isinstance(decision, rollbacks.NoRollback):
            if rules.action == rollbacks.ROLLBACK:
                self.record.warn(decision.why)
            return
        self.rollback_plan = decision
        self.record.say(
            f"loss spike at step {spike}: stopping the trainer cooperatively to roll back to step "
            f"{decision.target.step}"
        )
        self.plan = plan = StopPlan(
            kill=False, grace_seconds=self.spec.grace_seconds, requested_at=time.monotonic()
        )
        plan.stage = self._first_stop_stage(process)

    def stop_unlisted(self, process: subprocess.Popen[bytes], where: Path) -> None:
        """The run folder itself was renamed or moved out of the runs folder (or replaced): no
        server can list the run any more, and its lock would hold the workspace for the trainer's
        whole life. The trainer is stopped cooperatively (it saves its checkpoint), as for a
        deleted folder, and the run ends where its folder now is (issue 39)."""
        if self.plan is not None:
            return
        why = (
            f"the run folder was renamed or replaced: run {self.spec.run_id} is now in {where}, where "
            "no server lists it, and it would lock the workspace: stopping its trainer cooperatively"
        )
        print(f"arena agent: {why} (pid {process.pid})", file=sys.stderr, flush=True)
        self.record.say(why)
        self.stop_cooperatively(process)

    def stop_cooperatively(self, process: subprocess.Popen[bytes]) -> None:
        self.plan = plan = StopPlan(
            kill=False, grace_seconds=self.spec.grace_seconds, requested_at=time.monotonic()
        )
        plan.stage = "signal" if platform.send_cooperative_signal(process.pid) else "file"
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self.record.move(RunStatus.STOPPING)

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

    def clear_stop_file(self) -> None:
        """The rollback's stop file goes before the relaunch (the next attempt must not stop at once)."""
        try:
            self.run_dir.stop_file.unlink()
        except FileNotFoundError:
            pass
        except OSError as error:
            self.record.warn(f"could not remove the stop file after the rollback's stop: {error}")
