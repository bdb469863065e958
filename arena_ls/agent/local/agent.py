"""The job agent: one small detached process per run that owns the trainer.

Started by a server as ``python -m arena_ls.agent.local.agent RUN_DIR``, it
outlives the server and the editor. It reads its run folder and spec, holds
the run's lock, records every status change atomically in ``state.json`` and
hands the trainer to the attempt loop (``attempts``): the process tree, the
stop protocol, stalls, failures and the battery pause are ``LocalTrainer``'s
(``trainer``); for ``train`` jobs the loop relaunches a crashed trainer
from its last checkpoint (the watchdog). It imports nothing of the LSP
stack, so it starts fast and stays small.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
from pathlib import Path

from arena_ls import platform
from arena_ls.agent.agent_laptop import Laptop
from arena_ls.agent.attempts import AttemptLoop, RunRecord
from arena_ls.agent.local.trainer import LocalTrainer
from arena_ls.agent.reserve import StateReserve
from arena_ls.agent.resume_args import path_at
from arena_ls.agent.statewriter import StateWriter
from arena_ls.agent.trainer_start import EarlyLaunch, recorded_argv
from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.outputlog import ARENA, FLUSH_PATIENCE, OutputWriter
from arena_ls.run.rundir import Failure, RunDir, RunSpec, RunState, StateBusy
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

log = logging.getLogger("arena_ls.agent")

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


class Agent:
    """Runs one run to its end. See the module docstring."""

    def __init__(
        self, run_dir: RunDir, early: EarlyLaunch | None = None, folder: platform.FolderHandle = -1
    ) -> None:
        self.run_dir = run_dir
        self.early = early
        """The first attempt's trainer, when ``launch`` started it before loading the agent."""
        self.spec = read_spec_following(run_dir, folder)
        self.folder = StateFolder(run_dir.path.parent.parent)
        self.state = RunState(run_id=self.spec.run_id, job_id=self.spec.job_id)
        self.state.agent_pid = os.getpid()
        self.state.agent_create_time = platform.process_identity(os.getpid())
        if early is not None:  # launch recorded the run (or 0): the agent's writes continue from it
            self.state.generation = early.generation
        self.state.argv = recorded_argv(
            self.spec.argv, self.spec.resume_args, self.spec.resumed_from_step, self._spec_checkpoint_path()
        )
        if self.spec.resumed_from_step is not None:
            try:
                previous = self.spec.job_checkpoint or self.folder.job_checkpoint(self.spec.job_id)
            except StateBusy:  # held open (Windows): the next checkpoint is recorded anyway
                previous = None
            if previous is not None and previous.step == self.spec.resumed_from_step:
                self.state.last_checkpoint = previous
        self.output = (
            early.writer if early is not None else OutputWriter(run_dir.path, background_commits=True)
        )
        self.lock = threading.RLock()
        self.reserve = StateReserve(run_dir.path)
        self.writer = StateWriter(
            run_dir, self.folder, self.state, self.lock, self.tell, reserve=self.reserve
        )
        self.writer.keep_history = self.spec.checkpoint_history
        self.record = RunRecord(self.spec, self.state, self.lock, self.tell, self.writer.request)
        """The run's state and ``arena`` lines as the attempt loop (``attempts``) changes them."""
        self.trainer = LocalTrainer(
            run_dir, self.folder, self.record, self.writer, self.output, early, folder_handle=folder
        )
        self.laptop = Laptop(self.spec, run_dir, self.state, self.lock, self.tell, self.writer)
        """The machine kept awake while the run trains, and the person told (contract 8.3)."""

    # -- state ---------------------------------------------------------------------------

    def _spec_checkpoint_path(self) -> str | None:
        """The path of the checkpoint the run starts from (``{path}``), as the job recorded it."""
        step = self.spec.resumed_from_step
        return None if step is None else path_at(step, [self.spec.job_checkpoint])

    def tell(self, event: AgentRecord) -> None:
        """A record of the supervisor's own, in the run's log (stream ``arena``, ``agent_records``).

        Not part of ``tail``: failure evidence comes from the trainer's own lines.
        """
        self.output.append_line(ARENA, event.encode_lines())

    def say(self, text: str) -> None:
        """A note of the supervisor's own (no reader acts on it)."""
        self.tell(agent_records.note(text))

    def warn(self, text: str) -> None:
        """A warning of the supervisor's own (``warning: ...``)."""
        self.tell(agent_records.warning(text))

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
            self.laptop.start()
            AttemptLoop(self.record, self.trainer).run()
            return 0
        finally:
            self.laptop.release()
            self.output.flush(FLUSH_PATIENCE)  # a capped log's last table saved before the run reads as ended
            if not self.writer.close_final(1.0 if self.trainer.folder_watch.gone else FINAL_WRITE_TIMEOUT):
                log.error("the final state could not be written: the run folder is gone")
            self.laptop.finish()
            self.output.close()
            self.trainer.power.close()
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


def read_spec_following(run_dir: RunDir, folder: platform.FolderHandle) -> RunSpec:
    """The run's spec, from wherever its folder is now (``run_dir.path`` follows it).

    ``launch`` opened the folder (``folder``) before it started the trainer: a
    workspace moved while the agent was still loading (a second under load)
    left it reading the old path, and the agent died with its trainer, the run
    ``lost`` three seconds after its start."""
    while True:
        try:
            return run_dir.read_spec()
        except FileNotFoundError:
            where = platform.folder_now(folder, run_dir.path)
            if where is None or where == run_dir.path:
                raise
            run_dir.path = where


def main(
    argv: list[str] | None = None, early: EarlyLaunch | None = None, folder: platform.FolderHandle = -1
) -> int:
    """Run the agent for RUN_DIR; ``early`` is a trainer ``launch`` already started, ``folder`` the
    run folder as ``launch`` opened it (``platform.open_folder``: followed if it moved since)."""
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s agent %(message)s")
    if len(args) != 1:
        print("usage: python -m arena_ls.agent.local.agent RUN_DIR", file=sys.stderr)
        return 2
    path = Path(args[0]).resolve()
    run_dir = RunDir(platform.folder_now(folder, path) or path)
    platform.become_subreaper()
    gc.freeze()  # what is loaded by now lives as long as the agent: keep it out of every collection
    agent = Agent(run_dir, early, folder)
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
