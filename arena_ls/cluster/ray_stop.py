"""A cluster run's stop (``stop.json`` becomes Ray's stop) and the end of a submission, judged.

Owned by ``RayTrainer`` (``ray_trainer``), which hands it the run's record and folder, the
cluster, the state writer and the cluster's answers (``contact``); its own state is the stop
it sent (``sent_at``).
"""

from __future__ import annotations

import time

from arena_ls.agent.attempts import RunRecord
from arena_ls.agent.failure import classify
from arena_ls.agent.statewriter import StateWriter
from arena_ls.cluster.contact import ClusterContact
from arena_ls.cluster.jobsapi import ClusterError, JobsClient
from arena_ls.cluster.ray_logs import RayLogCopy
from arena_ls.cluster.status import (
    FAILED,
    STOPPED,
    SUCCEEDED,
    ended_at,
    exit_of,
    exit_status,
    final_status,
    first_line,
    stopped_by,
)
from arena_ls.cluster.submission import stop_wait_seconds
from arena_ls.run import agent_records
from arena_ls.run.rundir import ClusterRecord, ClusterSpec, Failure, RunDir
from arena_ls.run.states import RunStatus


class RayStop:
    """Stopping a submission on the cluster, and what its end means for the run."""

    def __init__(
        self,
        run_record: RunRecord,
        run_dir: RunDir,
        cluster: ClusterSpec,
        writer: StateWriter,
        contact: ClusterContact,
    ) -> None:
        self.run_record = run_record
        self.spec = run_record.spec
        self.state = run_record.state
        self.lock = run_record.lock
        self.run_dir = run_dir
        self.cluster = cluster
        self.writer = writer
        self.contact = contact
        self.record: ClusterRecord = self.state.cluster  # type: ignore[assignment]
        self.sent_at: float | None = None
        """Wall time of the stop request this agent acted on (the request's own time)."""

    def running(self) -> None:
        with self.lock:
            if self.state.status is RunStatus.STOPPING:
                return  # a stop is under way (an earlier agent's): it ran, and is ending
            self.state.started_at = self.state.started_at or time.time()
            self.state.exit_code = None
            self.state.signal = None
            self.state.failure = None
            self.state.next_launch_at = None
            self.run_record.move(RunStatus.RUNNING)
            if self.sent_at is not None:
                self.run_record.move(RunStatus.STOPPING)

    # -- stop -------------------------------------------------------------------------------

    def check(self, client: JobsClient, sid: str) -> None:
        """A ``stop.json`` request becomes Ray's stop (SIGTERM, then SIGKILL after the job's wait)."""
        if self.sent_at is not None:
            return
        request = self.run_dir.read_stop_request()
        if request is None:
            return
        at = request.get("at")
        requested_at = float(at) if isinstance(at, (int, float)) and not isinstance(at, bool) else time.time()
        wait = stop_wait_seconds(self.spec.grace_seconds)
        try:
            client.stop(sid)
        except ClusterError as error:
            self.contact.unreachable(error)
            self._stop_undelivered(str(error))
            return  # asked again at the next poll
        self._stop_undelivered(None)
        self.sent_at = requested_at
        by = request.get("by") or "a client"
        kill = (
            " (kill: Ray has no immediate kill, its SIGKILL follows the wait)" if request.get("kill") else ""
        )
        self.run_record.say(f"stop requested by {by}{kill}")
        self.run_record.say(
            f"asked cluster {self.cluster.name!r} to stop {sid}: SIGTERM now, SIGKILL after {wait}s"
        )
        with self.lock:
            if self.state.status is RunStatus.RUNNING:
                self.run_record.move(RunStatus.STOPPING)

    def _stop_undelivered(self, evidence: str | None) -> None:
        """Record that the stop could not reach the cluster (or, None, that it has now)."""
        with self.lock:
            if self.record.stop_undelivered == evidence:
                return
            self.record.stop_undelivered = evidence
        self.writer.request()

    # -- the end of a submission ------------------------------------------------------------

    def judge(self, ray_status: str, info: dict[str, object], logs: RayLogCopy) -> RunStatus | None:
        raw_message, raw_code = info.get("message"), info.get("driver_exit_code")
        message = raw_message if isinstance(raw_message, str) else None
        if isinstance(raw_code, int) and not isinstance(raw_code, bool):
            exit_code, signal_name = exit_of(f"exit code {raw_code}")
        else:
            exit_code, signal_name = exit_of(message)
        ran = (
            self.state.status in (RunStatus.RUNNING, RunStatus.STOPPING)
            or info.get("driver_exit_code") is not None
            or logs.copied > 0
        )
        if ran and ray_status in (FAILED, SUCCEEDED) and self.sent_at is None:
            self.running()  # it ran between two polls: say so before its end
        with self.lock:
            self.state.exit_code = 0 if ray_status == SUCCEEDED else exit_code
            self.state.signal = signal_name
            self.state.ended_at = time.time()
        stopping = self.sent_at is not None or self.state.status is RunStatus.STOPPING
        if stopping and ray_status in (STOPPED, FAILED, SUCCEEDED):
            sent_at = self.sent_at if self.sent_at is not None else time.time()
            ended = ended_at(info, time.time())
            by = stopped_by(ended - sent_at, stop_wait_seconds(self.spec.grace_seconds))
            with self.lock:
                self.state.stopped_by = by
            self.run_record.tell(agent_records.stopped(by))
            return RunStatus.STOPPED
        if ray_status == SUCCEEDED:
            self.run_record.tell(agent_records.exited(0, None))
            return RunStatus.SUCCEEDED
        if ray_status == STOPPED:  # stopped on the cluster itself (``ray job stop``)
            with self.lock:
                self.state.stopped_by = "signal"
            self.run_record.say(f"stopped on cluster {self.cluster.name!r}: {first_line(message)}")
            return RunStatus.STOPPED
        return self._failed(message, exit_code, signal_name, ran, logs)

    def _failed(
        self, message: str | None, exit_code: int | None, signal_name: str | None, ran: bool, logs: RayLogCopy
    ) -> RunStatus | None:
        failure = classify(
            exit_code=exit_code,
            signal_name=signal_name,
            tail=logs.tail(),
            nan_evidence=logs.announcements.nan_evidence,
            kind=self.spec.kind,
        )
        if exit_code is None and signal_name is None:
            failure = Failure("error", first_line(message) or "the cluster reported the job failed")
        if exit_code is not None or signal_name is not None:
            self.run_record.tell(agent_records.exited(exit_code, signal_name))
        self.run_record.crashed(failure, exit_status(exit_code, signal_name), signal_name)
        if message:
            self.run_record.say(f"cluster {self.cluster.name!r} says: {first_line(message)}")
        # A submission that never ran (its environment could not be set up) is not offered to the
        # watchdog; one that ran is (the watchdog may still give up: not relaunchable, budget, loop).
        return None if final_status(FAILED, can_relaunch=ran) is RunStatus.RESTARTING else RunStatus.CRASHED
