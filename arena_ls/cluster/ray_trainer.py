"""The Ray submission of one cluster run: the ``attempts.Trainer`` the cluster agent hands the loop.

Moved out of the cluster agent: submitting the job to Ray's Jobs API (its id
recorded first), following its status, waiting out a head that does not
answer and giving a run up whose job the cluster refuses to tell of. It owns,
rather than inherits, the parts that keep their own state: the log copy
(``ray_logs.RayLogCopy``, with the run's ``Announcements`` handler the local
trainer's output uses too), the stop and the judging of a submission's end
(``ray_stop.RayStop``) and the cluster's answers (``contact.ClusterContact``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from arena_ls.agent.attempts import Outcome, RunRecord
from arena_ls.agent.ckptverify import Verification
from arena_ls.agent.resume_args import ResumePathUnknown, path_at
from arena_ls.agent.savedfiles import find_saved_file
from arena_ls.agent.statewriter import StateWriter
from arena_ls.agent.trainer_start import trainer_argv
from arena_ls.agent.watchdog import Relaunch, Watchdog, WatchdogRules
from arena_ls.cluster.ckpt_remote import verify_on_cluster
from arena_ls.cluster.contact import ClusterContact
from arena_ls.cluster.jobsapi import ClusterError, JobsClient, NotSent, transient
from arena_ls.cluster.ray_logs import RayLogCopy
from arena_ls.cluster.ray_stop import RayStop
from arena_ls.cluster.status import (
    TERMINAL,
    live_status,
)
from arena_ls.cluster.submission import (
    PackageTooLarge,
    build_package,
    submission_id,
    submit_payload,
)
from arena_ls.run import agent_records
from arena_ls.run.outputlog import OutputWriter
from arena_ls.run.rundir import CheckpointRecord, ClusterRecord, Failure, RunDir
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

log = logging.getLogger("arena_ls.cluster.agent")

POLL_SECONDS = 0.25
"""How often Ray's status and log are read (Ray's own log tail polls about once a second)."""
UNREACHABLE_RETRY_SECONDS = 2.0
REFUSED_GIVE_UP_SECONDS = 60.0
"""How long the cluster may refuse to tell of the job (404: its job table lost it; 401/403: the
token changed; another 4xx) before the agent gives the run up as ``lost``. Only an unreachable
head (no answer, or a 5xx) is waited out without bound: the job keeps running there."""


@attrs.frozen
class Timing:
    """How often the agent polls and retries (``current``: this module's constants when it starts)."""

    poll_seconds: float = POLL_SECONDS
    unreachable_retry_seconds: float = UNREACHABLE_RETRY_SECONDS
    refused_give_up_seconds: float = REFUSED_GIVE_UP_SECONDS

    @classmethod
    def current(cls) -> Timing:
        """This module's constants as they are now (a test shortens them before an agent starts;
        the fields' defaults are the values at import)."""
        return cls(POLL_SECONDS, UNREACHABLE_RETRY_SECONDS, REFUSED_GIVE_UP_SECONDS)


class RayTrainer:
    """One cluster run's submissions to Ray, attempt after attempt (``attempts.Trainer``)."""

    def __init__(
        self,
        run_dir: RunDir,
        folder: StateFolder,
        run_record: RunRecord,
        writer: StateWriter,
        output: OutputWriter,
        adopt: bool,
        connect: Callable[[], JobsClient | Failure],
        timing: Timing,
    ) -> None:
        self.run_dir = run_dir
        self.folder = folder
        self.run_record = run_record
        self.spec = run_record.spec
        cluster = self.spec.cluster
        if cluster is None:
            raise ValueError(f"run {self.spec.run_id} is not a cluster run")
        self.cluster = cluster
        self.state = run_record.state
        self.lock = run_record.lock
        self.writer = writer
        self.adopting = adopt
        self.connect = connect
        """How the agent reaches the cluster (``abandon`` connects if it never did)."""
        self.timing = timing
        self.record: ClusterRecord = self.state.cluster  # type: ignore[assignment]
        self.client: JobsClient | None = None
        self.contact = ClusterContact(run_record, cluster.name)
        self.logs = RayLogCopy(run_record, run_dir, cluster.name, writer, output)
        """The submission's log, copied into ``output.log``; its announcements applied to the run."""
        self.announcements = self.logs.announcements
        self.announcements.attempt_announced = adopt
        """The current submission announced progress or a checkpoint (a new agent, not knowing
        what it missed, assumes so: a relaunch with resume is never the one that overwrites)."""
        self.stop = RayStop(run_record, run_dir, cluster, writer, self.contact)
        self.refused_since: float | None = None
        """When the cluster began refusing (a 4xx) to tell of the job: see ``REFUSED_GIVE_UP_SECONDS``."""
        self.attempt_step = (
            self.record.relaunch_step if self.record.relaunched else self.spec.resumed_from_step
        )
        """The step the current submission was launched from (None: from scratch)."""

    def first_attempt(self) -> Outcome:
        """A new run's first submission; or, adopting, the submission an earlier agent left."""
        sid = self.record.submission_id
        if self.adopting and self.state.status is RunStatus.RESTARTING:
            self.adopting = False  # the agent died during the backoff: finish waiting it out
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
        return self.announcements.attempt_announced

    def tail(self) -> list[str]:
        """The submission's last lines (the failure's evidence)."""
        return self.logs.tail()

    def launch(self, step: int | None, path: str | None = None, skip: int = 0) -> Outcome:
        return self._attempt(step)

    def rollback_wanted(self) -> None:
        """A cluster run has no loss-spike rollback (the agent does not follow its losses)."""
        return None

    def verify(self, ordered: list[CheckpointRecord]) -> Verification | None:
        """Read on the cluster, where the trainer's files are (``ckpt_remote``), never here."""
        self.run_record.say(f"verifying the checkpoints on cluster {self.cluster.name!r} before resuming")
        stop = lambda: self.run_dir.read_stop_request() is not None  # noqa: E731
        sid = self.record.submission_id
        return verify_on_cluster(self.client, self.spec, sid, self._package, stop, ordered)

    def saved_file(self) -> str | None:
        return self._saved_file()

    def watchdog(self) -> Watchdog:
        return self._watchdog()

    def decided(self, watchdog: Watchdog) -> None:
        """The watchdog's position is kept in ``state.json``: a new agent goes on with the same budget."""
        self.record.restarts_left = watchdog.budget_left

    def relaunching(self, relaunch: Relaunch) -> None:
        """Recorded with ``restarting``: an agent that dies in the backoff resumes from this step."""
        self.record.relaunch_step = relaunch.start_step
        self.record.relaunched = True

    def sit_out(self, relaunch: Relaunch) -> bool:
        return self._wait_backoff()

    def resume_paused(self) -> tuple[bool, int | None]:
        """A cluster run has no power rule: it is never paused for battery."""
        return False, None

    def _watchdog(self) -> Watchdog:
        """The run's watchdog, where the recorded state left it (a new agent continues it)."""
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
                self.run_record.say("stop requested during the backoff: relaunch cancelled")
                return False
            if time.time() >= due:
                return True
            time.sleep(min(self.timing.poll_seconds, max(0.0, due - time.time())))

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
        try:
            argv = trainer_argv(self.spec.argv, self.spec.resume_args, step, self._resume_path(step))
        except ResumePathUnknown as unknown:
            self.run_record.say(str(unknown))
            with self.lock:
                self.state.failure = Failure("resume-unknown", str(unknown))
                self.state.ended_at = time.time()
            return RunStatus.CRASHED
        self.attempt_step = step
        self.announcements.attempt_announced = False
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
        self.run_record.tell(agent_records.starting(self.spec.job_id, argv))
        self.run_record.tell(agent_records.submitting(self.cluster.name, sid))
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
            if posting and transient(error):
                self.run_record.warn(f"no answer to the submission of {sid} ({error}); asking for it")
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

    def _resume_path(self, step: int | None) -> str | None:
        """The announced path of the checkpoint at ``step`` (``{path}``): the run's last, else the job's."""
        if step is None:
            return None
        with self.lock:
            return path_at(step, [self.state.last_checkpoint, self.spec.job_checkpoint])

    def _submit_failed(self, evidence: str) -> RunStatus:
        self.run_record.say(f"the cluster did not accept the job: {evidence}")
        with self.lock:
            self.state.failure = Failure("error", f"the cluster did not accept the job: {evidence}")
            self.state.ended_at = time.time()
        return RunStatus.CRASHED

    def _follow(self, sid: str, resubmit_missing: bool) -> RunStatus | None:
        """Copy the submission's log and status until Ray finishes it."""
        assert self.client is not None
        self.logs.copied = self.logs.lines_recorded(sid) if self.adopting else 0
        self.adopting = False
        while True:
            self.stop.check(self.client, sid)
            try:
                info = self.client.info(sid)
                ray_status = str(info.get("status"))
                self.contact.answering()  # before the lines it missed, which the log copy catches up now
                self.logs.copy(self.client, sid, final=ray_status in TERMINAL)
            except ClusterError as error:
                if error.kind == "not-found" and resubmit_missing:
                    resubmit_missing = False  # recorded but never sent: send it now, once
                    self.run_record.say(
                        f"cluster {self.cluster.name!r} never received {sid}: submitting it now"
                    )
                    self.logs.copied = 0  # Ray has no line of it, whatever output.log holds before it
                    self.run_record.tell(
                        agent_records.submitting(self.cluster.name, sid)
                    )  # its lines begin here
                    failure = self._submit(sid, self.state.argv)
                    if failure is None:
                        self._accepted(sid)
                    elif failure.definite:
                        return self._submit_failed(failure.evidence)
                    else:  # no clear answer again: Ray may or may not have it; look again, then send
                        resubmit_missing = True
                        self.contact.unreachable(ClusterError("unreachable", failure.evidence))
                        time.sleep(self.timing.unreachable_retry_seconds)
                    continue
                if not transient(error) and self._refused_too_long():
                    return self._given_up(error)
                self.contact.unreachable(error)
                time.sleep(self.timing.unreachable_retry_seconds)
                continue
            resubmit_missing = False
            self.refused_since = None
            if self.record.accepted != sid:
                self._accepted(sid)  # a submission that got no clear answer: Ray has it
            if ray_status in TERMINAL:
                return self.stop.judge(ray_status, info, self.logs)
            live = live_status(ray_status, stopping=self.stop.sent_at is not None)
            if live in (RunStatus.RUNNING, RunStatus.STOPPING) and self.state.status in (
                RunStatus.STARTING,
                RunStatus.RESTARTING,
            ):
                self.stop.running()
            time.sleep(self.timing.poll_seconds)

    def _refused_too_long(self) -> bool:
        """The cluster answers, but not about the job (404, 401/403, another 4xx): for too long?"""
        now = time.monotonic()
        if self.refused_since is None:
            self.refused_since = now
        return now - self.refused_since >= self.timing.refused_give_up_seconds

    def _given_up(self, error: ClusterError) -> RunStatus:
        """The cluster keeps refusing to tell of the job: the run is ``lost`` (its end cannot be learned)."""
        evidence = f"{error} (for {self.timing.refused_give_up_seconds:g}s): the job is no longer followed"
        self.run_record.say(f"giving the run up: {evidence}")
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
            client = self.client or self.connect()
            if isinstance(client, Failure):
                return None
            client.stop(sid)
        except Exception as error:  # best effort: the verdict stands either way
            log.warning("could not ask the cluster to stop %s: %s", sid, error)
            return None
        return f"asked cluster {self.cluster.name!r} to stop {sid}"
