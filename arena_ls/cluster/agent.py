"""The agent of one cluster run: a detached process on this machine, like a local run's agent.

Started by a server as ``python -m arena_ls.cluster.agent RUN_DIR`` (or with
``--adopt`` by a server that found a cluster run whose agent is gone), it
submits the job to Ray's Jobs API, copies Ray's log of it into the run's
``output.log`` with the same writer a local agent uses, maps Ray's status
onto ``state.json``, turns a ``stop.json`` request into Ray's stop, and
resubmits a failed ``train`` job from its last checkpoint under the same
watchdog rules as a local run. Every server reads only the run folder, so
cursors, ``$/progress``, metrics, announcements and failure classes are the
same as for a local run.

The job itself runs on the cluster: when this process dies (the laptop
closes), the job goes on, and the next agent catches up Ray's log from
where ``output.log`` ends. Before each submission its id is recorded (and a
``submitting ... as ID`` line written), so an agent that died around a
submission neither loses nor duplicates it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from pathlib import Path

from arena_ls import platform
from arena_ls.agent.agent_laptop import Laptop
from arena_ls.agent.attempts import AttemptLoop, RunRecord
from arena_ls.agent.resume_args import path_at
from arena_ls.agent.statewriter import StateWriter
from arena_ls.agent.trainer_start import recorded_argv
from arena_ls.cluster.config import read_token
from arena_ls.cluster.jobsapi import ClusterError, JobsClient
from arena_ls.cluster.ray_trainer import RayTrainer, Timing
from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.outputlog import ARENA, FLUSH_PATIENCE, OutputWriter
from arena_ls.run.rundir import ClusterRecord, Failure, RunDir, RunSpec, RunState
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

log = logging.getLogger("arena_ls.cluster.agent")

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
        self.output = OutputWriter(run_dir.path, background_commits=True)
        self.lock = threading.RLock()
        self.writer = StateWriter.reserving(run_dir, self.folder, self.state, self.lock, self.tell)
        self.run_record = RunRecord(self.spec, self.state, self.lock, self.tell, self.writer.request)
        """The run's state and ``arena`` lines as the attempt loop (``attempts``) changes them."""
        if adopt and self.state.last_checkpoint is not None:  # what the earlier agent saw announced
            self.run_record.announced.append(self.state.last_checkpoint)
        connect = lambda: self._connect()  # noqa: E731 (late: a test replaces ``_connect``)
        self.trainer = RayTrainer(
            run_dir, self.folder, self.run_record, self.writer, self.output, adopt, connect, Timing.current()
        )
        self.laptop = Laptop(self.spec, run_dir, self.state, self.lock, self.tell, self.writer)
        """The person told of the run's events (contract 8.3); nothing is kept awake for a cluster."""

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
            step = self.spec.resumed_from_step
            path = None if step is None else path_at(step, [self.spec.job_checkpoint])
            state.argv = recorded_argv(self.spec.argv, self.spec.resume_args, step, path)
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

    def tell(self, event: AgentRecord) -> None:
        """A record of the supervisor's own in the run's log (stream ``arena``, ``agent_records``)."""
        self.output.append_line(ARENA, event.encode_lines())

    def say(self, text: str) -> None:
        """A note of the supervisor's own (no reader acts on it)."""
        self.tell(agent_records.note(text))

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
            self.say(f"following the run on cluster {name!r} again (a new agent, pid {pid})")
        try:
            self.laptop.start()
            self._run_attempts()
        finally:
            self.laptop.release()
            self.output.flush(FLUSH_PATIENCE)  # a capped log's last table saved before the run reads as ended
            if not self.writer.close_final(FINAL_WRITE_TIMEOUT):  # retried while the run folder is there
                log.error("the final state could not be written: the run folder is gone")
            self.laptop.finish()
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
        self.trainer.client = client
        # a new run's first launch is the loop's own: a start that resumes verifies first (8.2)
        first = self.trainer.first_attempt if self.adopting else None
        AttemptLoop(self.run_record, self.trainer).run(first=first)


def main(argv: list[str] | None = None) -> int:
    """Follow the cluster run in RUN_DIR (``--adopt``: one an earlier agent left)."""
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
    """The agent failed: an unfinished run is ``lost``, its job asked to stop, the lock freed."""
    with agent.lock:
        final = agent.state.status.is_final
    stopped = None if final else agent.trainer.abandon()  # never leave a job running unfollowed
    with agent.lock:
        if not final:
            evidence = "the cluster agent failed; see agent.log"
            agent.state.failure = Failure("error", f"{evidence}; {stopped}" if stopped else evidence)
            agent.state.status = RunStatus.LOST
        with contextlib.suppress(OSError):
            agent.run_dir.write_state(agent.state)
    RunLock(agent.folder).release(agent.spec.run_id)


if __name__ == "__main__":
    sys.exit(main())
