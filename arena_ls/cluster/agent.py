"""The follower of one cluster run: a detached process on this machine, like a local run's agent.

Started by a server as ``python -m arena_ls.cluster.agent RUN_DIR`` (or with
``--adopt`` by a server that found a cluster run whose follower is gone), it
submits the job to Ray's Jobs API, copies Ray's log of it into the run's
``output.log`` with the same writer a local agent uses, maps Ray's status
onto ``state.json``, turns a ``stop.json`` request into Ray's stop, and
resubmits a failed ``train`` job from its last checkpoint under the same
watchdog rules as a local run. Every server reads only the run folder, so
cursors, ``$/progress``, metrics, announcements and failure classes are the
same as for a local run.

The job itself runs on the cluster: when this process dies (the laptop
closes), the job goes on, and the next follower catches up Ray's log from
where ``output.log`` ends. Before each submission its id is recorded (and a
``submitting ... as ID`` line written), so a follower that died around a
submission neither loses nor duplicates it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path

import attrs

from arena_ls import platform
from arena_ls.cluster.config import read_token
from arena_ls.cluster.jobsapi import ClusterError, JobsClient
from arena_ls.cluster.status import (
    FAILED,
    STOPPED,
    SUCCEEDED,
    TERMINAL,
    ended_at,
    exit_of,
    exit_status,
    final_status,
    first_line,
    live_status,
    stopped_by,
)
from arena_ls.cluster.submission import (
    PackageTooLarge,
    build_package,
    stop_wait_seconds,
    submission_id,
    submit_payload,
)
from arena_ls.lifecycle import supervisor_events as events
from arena_ls.lifecycle.attempts import AttemptLoop, Outcome, RunRecord
from arena_ls.lifecycle.capture import LogLine, trainer_lines_after
from arena_ls.lifecycle.events import Checkpoint, EventParser, Progress, is_bad_loss
from arena_ls.lifecycle.failure import classify
from arena_ls.lifecycle.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.lifecycle.rundir import (
    CheckpointRecord,
    ClusterRecord,
    Failure,
    RunDir,
    RunSpec,
    RunState,
    StateFolder,
)
from arena_ls.lifecycle.runlock import RunLock
from arena_ls.lifecycle.savedfiles import find_saved_file
from arena_ls.lifecycle.states import RunStatus
from arena_ls.lifecycle.statewriter import StateWriter
from arena_ls.lifecycle.supervisor_events import Kind, SupervisorEvent
from arena_ls.lifecycle.trainer_start import trainer_argv
from arena_ls.lifecycle.watchdog import Relaunch, Watchdog, WatchdogRules

log = logging.getLogger("arena_ls.cluster.agent")

POLL_SECONDS = 0.25
"""How often Ray's status and log are read (Ray's own log tail polls about once a second)."""
UNREACHABLE_RETRY_SECONDS = 2.0
REFUSED_GIVE_UP_SECONDS = 60.0
"""How long the cluster may refuse to tell of the job (404: its job table lost it; 401/403: the
token changed; another 4xx) before the follower gives the run up as ``lost``. Only an unreachable
head (no answer, or a 5xx) is waited out without bound: the job keeps running there."""
PROGRESS_WRITE_INTERVAL = 1.0
TAIL_LINES = 200
FINAL_WRITE_TIMEOUT = 30.0


class ClusterAgent:
    """Follows one cluster run to its end. See the module docstring."""

    def __init__(self, run_dir: RunDir, adopt: bool) -> None:
        self.run_dir = run_dir
        self.spec: RunSpec = run_dir.read_spec()
        cluster = self.spec.cluster
        if cluster is None:
            raise ValueError(f"run {self.spec.run_id} is not a cluster run")
        self.cluster = cluster
        self.folder = StateFolder(run_dir.path.parent.parent)
        self.adopting = adopt
        self.state = self._initial_state(adopt)
        self.record: ClusterRecord = self.state.cluster  # type: ignore[assignment]
        self.output = OutputWriter(run_dir.path)
        self.parser = EventParser.for_patterns(self.spec.progress_pattern, self.spec.checkpoint_pattern)
        self.lock = threading.RLock()
        self.writer = StateWriter.reserving(run_dir, self.folder, self.state, self.lock, self.tell)
        self.run_record = RunRecord(self.spec, self.state, self.lock, self.tell, self.writer.request)
        """The run's state and ``arena`` lines as the attempt loop (``attempts``) changes them."""
        self.client: JobsClient | None = None
        self.tail_buffer: deque[str] = deque(maxlen=TAIL_LINES)
        self.copied = 0
        """Lines of the current submission's log already in ``output.log``."""
        self.stop_sent_at: float | None = None
        """Wall time of the stop request this follower acted on (the request's own time)."""
        self.nan_evidence: str | None = None
        self.last_progress_write = 0.0
        self.unreachable_said = False
        self.refused_since: float | None = None
        """When the cluster began refusing (a 4xx) to tell of the job: see ``REFUSED_GIVE_UP_SECONDS``."""
        self.attempt_step = (
            self.record.relaunch_step if self.record.relaunched else self.spec.resumed_from_step
        )
        """The step the current submission was launched from (None: from scratch)."""
        self.attempt_announced = adopt
        """The current submission announced progress or a checkpoint (a new follower, not knowing
        what it missed, assumes so: a relaunch with resume is never the one that overwrites)."""

    def _initial_state(self, adopt: bool) -> RunState:
        state = RunState(run_id=self.spec.run_id, job_id=self.spec.job_id)
        if adopt:
            state = self.run_dir.read_state()
        if state.cluster is None:
            state.cluster = ClusterRecord(
                name=self.cluster.name, kind=self.cluster.kind, address=self.cluster.address
            )
        state.agent_pid = os.getpid()
        state.agent_create_time = platform.process_identity(os.getpid())
        if not adopt:
            state.argv = trainer_argv(self.spec.argv, self.spec.resume_args, self.spec.resumed_from_step)
            resumed = self.spec.resumed_from_step is not None
            previous = (
                (self.spec.job_checkpoint or self.folder.job_checkpoint(self.spec.job_id))
                if resumed
                else None
            )
            if previous is not None and previous.step == self.spec.resumed_from_step:
                state.last_checkpoint = previous
        return state

    # -- state ------------------------------------------------------------------------------

    def tell(self, event: SupervisorEvent) -> None:
        """A record of the supervisor's own in the run's log (stream ``arena``, ``supervisor_events``)."""
        self.output.append_line(ARENA, event.encode_lines())

    def say(self, text: str) -> None:
        """A note of the supervisor's own (no reader acts on it)."""
        self.tell(events.note(text))

    def warn(self, text: str) -> None:
        self.tell(events.warning(text))

    def _move(self, target: RunStatus) -> None:
        self.run_record.move(target)

    # -- main loop --------------------------------------------------------------------------

    def run(self) -> int:
        """Follow the run to a final status; 0 (the status is in ``state.json``)."""
        self.run_dir.write_state(self.state)
        if self.adopting:
            with contextlib.suppress(OSError):
                RunLock(self.folder).record_agent(
                    self.spec.run_id, self.state.agent_pid or os.getpid(), self.state.agent_create_time
                )
            name, pid = self.cluster.name, os.getpid()
            self.say(f"following the run on cluster {name!r} again (a new follower, pid {pid})")
        try:
            self._run_attempts()
        finally:
            if not self.writer.close_final(FINAL_WRITE_TIMEOUT):  # retried while the run folder is there
                log.error("the final state could not be written: the run folder is gone")
            self.output.close()
            RunLock(self.folder).release(self.spec.run_id)
        return 0

    def _connect(self) -> JobsClient | Failure:
        try:
            token = read_token(self.cluster.name, self.cluster.token_file)
        except ClusterError as error:
            return Failure("error", str(error))
        return JobsClient(self.cluster.name, self.cluster.address, token)

    def _run_attempts(self) -> None:
        """Submit (or keep following) the job, and resubmit it under the watchdog's rules (``attempts``)."""
        client = self._connect()
        if isinstance(client, Failure):
            with self.lock:
                self.state.failure = client
            self.say(f"cannot use cluster {self.cluster.name!r}: {client.evidence}")
            self.run_record.finish(RunStatus.CRASHED)
            return
        self.client = client
        AttemptLoop(self.run_record, self).run(first=self._first_attempt)

    def _first_attempt(self) -> Outcome:
        """A new run's first submission; or, adopting, the submission an earlier follower left."""
        sid = self.record.submission_id
        if self.adopting and self.state.status is RunStatus.RESTARTING:
            self.adopting = False  # the follower died during the backoff: finish waiting it out
            if not self._wait_backoff():
                return RunStatus.STOPPED
            record = self.record
            return self.launch(record.relaunch_step if record.relaunched else self._checkpoint_step())
        if self.adopting and sid is not None:
            return self._follow(sid, resubmit_missing=True)
        return self.launch(self.spec.resumed_from_step)

    # -- the Trainer of the attempt loop (``attempts.Trainer``): a Ray submission -------------

    @property
    def launched_from(self) -> int | None:
        return self.attempt_step

    @property
    def announced(self) -> bool:
        return self.attempt_announced

    def launch(self, step: int | None) -> Outcome:
        return self._attempt(step)

    def tail(self) -> list[str]:
        return list(self.tail_buffer)

    def saved_file(self) -> str | None:
        return self._saved_file()

    def watchdog(self) -> Watchdog:
        return self._watchdog()

    def decided(self, watchdog: Watchdog) -> None:
        """The watchdog's position is kept in ``state.json``: a new follower goes on with the same budget."""
        self.record.restarts_left = watchdog.budget_left

    def relaunching(self, relaunch: Relaunch) -> None:
        """Recorded with ``restarting``: a follower that dies in the backoff resumes from this step."""
        self.record.relaunch_step = relaunch.start_step
        self.record.relaunched = True

    def sit_out(self, relaunch: Relaunch) -> bool:
        return self._wait_backoff()

    def resume_paused(self) -> tuple[bool, int | None]:
        """A cluster run has no power rule: it is never paused for battery."""
        return False, None

    def _watchdog(self) -> Watchdog:
        """The run's watchdog, where the recorded state left it (a new follower continues it)."""
        spec = self.spec
        rules = WatchdogRules.for_job(
            kind=spec.kind,
            resume_args=spec.resume_args,
            max_restarts=spec.max_restarts,
            backoff_seconds=spec.backoff_seconds,
        )
        record = self.record
        return Watchdog.resumed(
            rules,
            budget_left=record.restarts_left,
            restarts=self.state.restarts,
            relaunched_from=record.relaunch_step,
            relaunched=record.relaunched,
        )

    def _wait_backoff(self) -> bool:
        """Wait until the recorded relaunch time; False when a stop request cancelled the relaunch."""
        while True:
            due = self.state.next_launch_at or 0.0
            if self.run_dir.read_stop_request() is not None:
                self.say("stop requested during the backoff: relaunch cancelled")
                return False
            if time.time() >= due:
                return True
            time.sleep(min(POLL_SECONDS, max(0.0, due - time.time())))

    def _checkpoint_step(self) -> int | None:
        return self.run_record.checkpoint_step()

    def _saved_file(self) -> str | None:
        """A file the job's runs announced: here if it is visible here, else on the cluster, unseen.

        arena-ls cannot look at the cluster's disks; a path a run announced there is taken to
        exist (never guess in the direction that overwrites)."""
        paths = self.spec.checkpoint_paths
        found = find_saved_file(Path(self.spec.cwd), paths)
        if found is not None or not paths:
            return found
        name = self.cluster.name
        return f"{paths[-1]} (announced by an earlier run, on cluster {name!r}, where it cannot be looked at)"

    # -- one submission ---------------------------------------------------------------------

    def _attempt(self, step: int | None) -> RunStatus | None:
        """Submit once and follow it; a final status, or None when the watchdog may relaunch."""
        argv = trainer_argv(self.spec.argv, self.spec.resume_args, step)
        self.attempt_step = step
        self.attempt_announced = False
        record = self.record
        sid = submission_id(self.spec.run_id, len(record.submissions) + 1)
        with self.lock:
            record.submission_id = sid
            record.submissions.append(sid)
            self.state.argv = argv
        if not self.writer.flush(5.0):  # the id is on disk before Ray hears of it (see the module docstring)
            return self._submit_failed(
                f"its submission id could not be recorded in {self.run_dir.state_path}"
            )
        self.tell(events.starting(self.spec.job_id, argv))
        self.tell(events.submitting(self.cluster.name, sid))
        failure = self._submit(sid, argv)
        if failure is None:
            self._accepted(sid)
            return self._follow(sid, resubmit_missing=False)
        if failure.definite:
            return self._submit_failed(failure.evidence)
        return self._follow(sid, resubmit_missing=True)  # Ray may have it: following finds out

    def _accepted(self, sid: str) -> None:
        """Ray has the submission (``arena/start`` answers once this is on disk)."""
        with self.lock:
            self.record.accepted = sid
        self.writer.request()

    def _submit(self, sid: str, argv: list[str]) -> NotSent | None:
        """Send the submission; None when Ray accepted it, else why not (and whether Ray surely lacks it).

        Only an answer that refuses it (a 4xx) or a failure before the submission itself was
        sent (the package) is definite: a submission that timed out, was reset or got a 5xx
        may have reached Ray, so it is followed by its recorded id (and sent again only if Ray
        does not know it)."""
        assert self.client is not None
        posting = False
        try:
            package = self._package()
            posting = True
            self.client.submit(submit_payload(self.spec, argv, sid, package))
        except ClusterError as error:
            if posting and _transient(error):
                self.warn(f"no answer to the submission of {sid} ({error}); asking for it")
                return NotSent(str(error), definite=False)
            return NotSent(str(error), definite=True)
        except (PackageTooLarge, OSError) as error:
            return NotSent(str(error), definite=True)
        return None

    def _package(self) -> str:
        """The run's ``working_dir`` package: built and uploaded once, reused by every resubmission."""
        assert self.client is not None
        record = self.record
        if record.package is not None and self.client.package_exists(record.package):
            return record.package
        root = Path(self.spec.cwd)
        skip = []
        with contextlib.suppress(ValueError):
            skip.append(self.folder.root.resolve().relative_to(root.resolve()))
        uri, data = build_package(root, skip)
        if not self.client.package_exists(uri):
            self.client.upload_package(uri, data)
        with self.lock:
            record.package = uri
        self.writer.request()
        return uri

    def _submit_failed(self, evidence: str) -> RunStatus:
        self.say(f"the cluster did not accept the job: {evidence}")
        with self.lock:
            self.state.failure = Failure("error", f"the cluster did not accept the job: {evidence}")
            self.state.ended_at = time.time()
        return RunStatus.CRASHED

    def _follow(self, sid: str, resubmit_missing: bool) -> RunStatus | None:
        """Copy the submission's log and status until Ray finishes it."""
        assert self.client is not None
        self.copied = self._lines_recorded(sid) if self.adopting else 0
        self.adopting = False
        while True:
            self._check_stop(sid)
            try:
                info = self.client.info(sid)
                ray_status = str(info.get("status"))
                self._answering()  # before the lines it missed, which the log copy catches up now
                self._copy_logs(sid, final=ray_status in TERMINAL)
            except ClusterError as error:
                if error.kind == "not-found" and resubmit_missing:
                    resubmit_missing = False  # recorded but never sent: send it now, once
                    self.say(f"cluster {self.cluster.name!r} never received {sid}: submitting it now")
                    self.copied = 0  # Ray has no line of it, whatever output.log holds before it
                    self.tell(events.submitting(self.cluster.name, sid))  # its lines begin here
                    failure = self._submit(sid, self.state.argv)
                    if failure is None:
                        self._accepted(sid)
                    elif failure.definite:
                        return self._submit_failed(failure.evidence)
                    else:  # no clear answer again: Ray may or may not have it; look again, then send
                        resubmit_missing = True
                        self._unreachable(ClusterError("unreachable", failure.evidence))
                        time.sleep(UNREACHABLE_RETRY_SECONDS)
                    continue
                if not _transient(error) and self._refused_too_long():
                    return self._given_up(error)
                self._unreachable(error)
                time.sleep(UNREACHABLE_RETRY_SECONDS)
                continue
            resubmit_missing = False
            self.refused_since = None
            if self.record.accepted != sid:
                self._accepted(sid)  # a submission that got no clear answer: Ray has it
            if ray_status in TERMINAL:
                return self._judge(ray_status, info)
            live = live_status(ray_status, stopping=self.stop_sent_at is not None)
            if live in (RunStatus.RUNNING, RunStatus.STOPPING) and self.state.status in (
                RunStatus.STARTING,
                RunStatus.RESTARTING,
            ):
                self._running()
            time.sleep(POLL_SECONDS)

    def _refused_too_long(self) -> bool:
        """The cluster answers, but not about the job (404, 401/403, another 4xx): for too long?"""
        now = time.monotonic()
        if self.refused_since is None:
            self.refused_since = now
        return now - self.refused_since >= REFUSED_GIVE_UP_SECONDS

    def _given_up(self, error: ClusterError) -> RunStatus:
        """The cluster keeps refusing to tell of the job: the run is ``lost`` (its end cannot be learned)."""
        evidence = f"{error} (for {REFUSED_GIVE_UP_SECONDS:g}s): the job is no longer followed"
        self.say(f"giving the run up: {evidence}")
        with self.lock:
            self.state.failure = Failure("error", evidence)
            self.state.ended_at = time.time()
        return RunStatus.LOST

    def abandon(self) -> str | None:
        """Best effort: ask the cluster to stop the run's job (the run is given up as ``lost``)."""
        sid = self.record.submission_id
        if sid is None:
            return None
        try:
            client = self.client or self._connect()
            if isinstance(client, Failure):
                return None
            client.stop(sid)
        except Exception as error:  # best effort: the verdict stands either way
            log.warning("could not ask the cluster to stop %s: %s", sid, error)
            return None
        return f"asked cluster {self.cluster.name!r} to stop {sid}"

    def _answering(self) -> None:
        if self.unreachable_said:
            self.unreachable_said = False
            self.say(f"cluster {self.cluster.name!r} answers again")

    def _unreachable(self, error: ClusterError) -> None:
        if not self.unreachable_said:
            self.unreachable_said = True
            self.warn(f"{error}; the job keeps running there, retrying")

    def _running(self) -> None:
        with self.lock:
            if self.state.status is RunStatus.STOPPING:
                return  # a stop is under way (an earlier follower's): it ran, and is ending
            self.state.started_at = self.state.started_at or time.time()
            self.state.exit_code = None
            self.state.signal = None
            self.state.failure = None
            self.state.next_launch_at = None
            self._move(RunStatus.RUNNING)
            if self.stop_sent_at is not None:
                self._move(RunStatus.STOPPING)

    def _lines_recorded(self, sid: str) -> int:
        """How many of submission ``sid``'s log lines ``output.log`` already holds.

        Counted from the run's own log (the truth, whatever ``state.json`` says):
        the trainer's lines after the ``submitting ... as sid`` line."""
        marker = events.submitting(self.cluster.name, sid)

        def is_marker(line: LogLine) -> bool:
            event = line.event
            return event is not None and event.kind is Kind.SUBMITTING and event.fields == marker.fields

        return trainer_lines_after(self.run_dir.path, is_marker)

    def _copy_logs(self, sid: str, final: bool) -> None:
        """Append the submission's new complete lines (and, once it has ended, an unfinished last one)."""
        assert self.client is not None
        text = self.client.logs(sid)
        pieces = text.split("\n")
        complete, rest = pieces[:-1], pieces[-1]
        new = complete[self.copied :]
        if new:
            self.output.append(STDOUT, ("\n".join(new) + "\n").encode("utf-8", "replace"))
            self.copied += len(new)
            for line in new:
                self._scan(line)
        if final and rest and self.copied <= len(complete):
            self.output.append(STDOUT, rest.encode("utf-8", "replace"))
            self.output.finish_stream(STDOUT)
            self.copied += 1
            self._scan(rest)

    def _scan(self, line: str) -> None:
        line = line.rstrip("\r").rsplit("\r", 1)[-1]
        self.tail_buffer.append(line)
        event = self.parser.parse_safely(line)
        if isinstance(event, Checkpoint):
            record = CheckpointRecord(
                step=event.step, path=event.path, at=time.time(), run_id=self.spec.run_id
            )
            with self.lock:
                self.attempt_announced = True
                self.state.last_checkpoint = record
                self.state.step = max(self.state.step or 0, event.step)
            self.writer.request(job_checkpoint=(self.spec.job_id, record))
        elif isinstance(event, Progress):
            with self.lock:
                self.attempt_announced = True
                self.state.step = event.step
                self.state.total_steps = event.total or self.state.total_steps
                self.state.loss = event.loss
                if is_bad_loss(event.loss) and self.nan_evidence is None:
                    self.nan_evidence = f"loss is {event.loss} at step {event.step}"
                    self.warn(self.nan_evidence)
            now = time.monotonic()
            if now - self.last_progress_write >= PROGRESS_WRITE_INTERVAL:
                self.last_progress_write = now
                self.writer.request()

    # -- stop -------------------------------------------------------------------------------

    def _check_stop(self, sid: str) -> None:
        """A ``stop.json`` request becomes Ray's stop (SIGTERM, then SIGKILL after the job's wait)."""
        if self.stop_sent_at is not None:
            return
        request = self.run_dir.read_stop_request()
        if request is None:
            return
        assert self.client is not None
        at = request.get("at")
        requested_at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else time.time()
        wait = stop_wait_seconds(self.spec.grace_seconds)
        try:
            self.client.stop(sid)
        except ClusterError as error:
            self._unreachable(error)
            self._stop_undelivered(str(error))
            return  # asked again at the next poll
        self._stop_undelivered(None)
        self.stop_sent_at = requested_at
        by = request.get("by") or "a client"
        kill = (
            " (kill: Ray has no immediate kill, its SIGKILL follows the wait)" if request.get("kill") else ""
        )
        self.say(f"stop requested by {by}{kill}")
        self.say(f"asked cluster {self.cluster.name!r} to stop {sid}: SIGTERM now, SIGKILL after {wait}s")
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self._move(RunStatus.STOPPING)

    def _stop_undelivered(self, evidence: str | None) -> None:
        """Record that the stop could not reach the cluster (or, None, that it has now)."""
        with self.lock:
            if self.record.stop_undelivered == evidence:
                return
            self.record.stop_undelivered = evidence
        self.writer.request()

    # -- the end of a submission ------------------------------------------------------------

    def _judge(self, ray_status: str, info: dict[str, object]) -> RunStatus | None:
        raw_message, raw_code = info.get("message"), info.get("driver_exit_code")
        message = raw_message if isinstance(raw_message, str) else None
        if isinstance(raw_code, int) and not isinstance(raw_code, bool):
            exit_code, signal_name = exit_of(f"exit code {raw_code}")
        else:
            exit_code, signal_name = exit_of(message)
        ran = (
            self.state.status in (RunStatus.RUNNING, RunStatus.STOPPING)
            or info.get("driver_exit_code") is not None
            or self.copied > 0
        )
        if ran and ray_status in (FAILED, SUCCEEDED) and self.stop_sent_at is None:
            self._running()  # it ran between two polls: say so before its end
        with self.lock:
            self.state.exit_code = 0 if ray_status == SUCCEEDED else exit_code
            self.state.signal = signal_name
            self.state.ended_at = time.time()
        stopping = self.stop_sent_at is not None or self.state.status is RunStatus.STOPPING
        if stopping and ray_status in (STOPPED, FAILED, SUCCEEDED):
            sent_at = self.stop_sent_at if self.stop_sent_at is not None else time.time()
            ended = ended_at(info, time.time())
            by = stopped_by(ended - sent_at, stop_wait_seconds(self.spec.grace_seconds))
            with self.lock:
                self.state.stopped_by = by
            self.tell(events.stopped(by))
            return RunStatus.STOPPED
        if ray_status == SUCCEEDED:
            self.tell(events.exited(0, None))
            return RunStatus.SUCCEEDED
        if ray_status == STOPPED:  # stopped on the cluster itself (``ray job stop``)
            with self.lock:
                self.state.stopped_by = "signal"
            self.say(f"stopped on cluster {self.cluster.name!r}: {first_line(message)}")
            return RunStatus.STOPPED
        return self._failed(message, exit_code, signal_name, ran)

    def _failed(
        self, message: str | None, exit_code: int | None, signal_name: str | None, ran: bool
    ) -> RunStatus | None:
        failure = classify(
            exit_code=exit_code,
            signal_name=signal_name,
            tail=self.tail(),
            nan_evidence=self.nan_evidence,
            kind=self.spec.kind,
        )
        if exit_code is None and signal_name is None:
            failure = Failure("error", first_line(message) or "the cluster reported the job failed")
        if exit_code is not None or signal_name is not None:
            self.tell(events.exited(exit_code, signal_name))
        self.run_record.crashed(failure, exit_status(exit_code, signal_name), signal_name)
        if message:
            self.say(f"cluster {self.cluster.name!r} says: {first_line(message)}")
        # A submission that never ran (its environment could not be set up) is not offered to the
        # watchdog; one that ran is (the watchdog may still give up: not relaunchable, budget, loop).
        return None if final_status(FAILED, can_relaunch=ran) is RunStatus.RESTARTING else RunStatus.CRASHED


def main(argv: list[str] | None = None) -> int:
    """Follow the cluster run in RUN_DIR (``--adopt``: one an earlier follower left)."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s cluster-agent %(message)s")
    adopt = "--adopt" in args
    paths = [a for a in args if a != "--adopt"]
    if len(paths) != 1:
        print("usage: python -m arena_ls.cluster.agent RUN_DIR [--adopt]", file=sys.stderr)
        return 2
    run_dir = RunDir(Path(paths[0]).resolve())
    agent: ClusterAgent | None = None
    try:
        agent = ClusterAgent(run_dir, adopt)
        return agent.run()
    except Exception:
        log.exception("the cluster agent failed")
        if agent is None:  # it submitted nothing: the server judges the run by its files
            return 1
        give_up(agent)
        return 1


def give_up(agent: ClusterAgent) -> None:
    """The follower failed: an unfinished run is ``lost``, its job asked to stop, the lock freed."""
    with agent.lock:
        final = agent.state.status.is_final
    stopped = None if final else agent.abandon()  # never leave a job running unfollowed
    with agent.lock:
        if not final:
            evidence = "the cluster agent failed; see agent.log"
            agent.state.failure = Failure("error", f"{evidence}; {stopped}" if stopped else evidence)
            agent.state.status = RunStatus.LOST
        with contextlib.suppress(OSError):
            agent.run_dir.write_state(agent.state)
    RunLock(agent.folder).release(agent.spec.run_id)


@attrs.frozen
class NotSent:
    """Why a submission was not accepted; ``definite``: Ray surely lacks it (it refused it, or
    nothing was sent), else it may have it (no clear answer came)."""

    evidence: str
    definite: bool


def _transient(error: ClusterError) -> bool:
    """No answer about the job at all (unreachable, or the head's own 5xx trouble): waited out."""
    return error.kind == "unreachable" or (error.status is not None and error.status >= 500)


if __name__ == "__main__":
    sys.exit(main())
