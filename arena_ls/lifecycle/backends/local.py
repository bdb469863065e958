"""The local back end: a run is a detached job agent on this machine, which owns the trainer.

The server spawns ``python -m arena_ls.agent.launch RUN_DIR`` detached
(it outlives the server and the editor), or hands the run to the spare
agent it loaded while the workspace was idle (``spare.py``; POSIX); the
agent starts the trainer,
captures its output and records its state (``arena_ls.agent.local.agent``).
The trainer dies with its agent (Linux: ``PR_SET_PDEATHSIG``; Windows: a
kill-on-close job object), so a run whose agent is gone is over: it cannot
be revived, only recorded ``lost`` and whatever is left of it killed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from arena_ls import platform
from arena_ls.errors import ArenaError
from arena_ls.lifecycle.backends.base import LOCAL, AgentProcess, RunPlan, detached_agent_alive
from arena_ls.lifecycle.spare import SpareAgent, agent_argv
from arena_ls.manifest import Job, ManifestResult
from arena_ls.run.rundir import RunDir, RunSpec, RunState
from arena_ls.settings import Settings

log = logging.getLogger(__name__)


class LocalBackend:
    """``RunBackend`` for runs on this machine."""

    def __init__(self, spare: SpareAgent | None = None) -> None:
        self.spare = spare
        """The agent loaded ahead of the next run, where the server keeps one (None: every start is cold)."""
        self._handed: tuple[str, AgentProcess] | None = None
        """The last run handed to the spare, and that spare (``start_again`` starts it cold if it died)."""

    @property
    def name(self) -> str:
        return LOCAL

    def takes(self, job: Job) -> bool:
        """Every job that names no cluster (``runOn``) runs on this machine."""
        return job.run_on is None

    def plan(self, job: Job, manifest: ManifestResult, settings: Settings) -> RunPlan:
        """The workspace's interpreter (``settings.python``), this machine's pre-flight as it is."""
        return RunPlan(python=settings.python, runs_here=True)

    def start(self, run_dir: RunDir, workspace: Path) -> AgentProcess:
        agent = self.spare.take(run_dir, workspace) if self.spare is not None else None
        if agent is not None:
            self._handed = (run_dir.run_id, agent)
            return agent
        return platform.spawn_detached(agent_argv(run_dir), cwd=workspace, log_file=run_dir.agent_log)

    def start_again(self, run_dir: RunDir, workspace: Path, failed: AgentProcess) -> AgentProcess | None:
        """The spare handed this run died before it claimed it: it started nothing, so start the run cold.

        The spare reads its order from a pipe, so it can die after the order
        was written and before it read it (or before it claimed the run).
        An agent claims its run before anything of it starts
        (``trainer_start.claim_run``), and ``failed`` has been reaped, so
        it can claim nothing any more: no claim means no trainer was ever
        started, and a cold agent (which claims the run in turn) starts it
        once. With the claim there, the spare may have started the trainer
        (which died with it): the start fails rather than risk a second one.
        A cold agent that died is never started again.
        """
        handed, self._handed = self._handed, None
        if handed is None or handed[0] != run_dir.run_id or handed[1] is not failed:
            return None
        code = failed.poll()
        if code is None:
            return None
        if run_dir.agent_claimed:
            log.warning(
                "run %s: the spare job agent (pid %s) died (exit code %s) after it took the run; "
                "not starting it again",
                run_dir.run_id,
                failed.pid,
                code,
            )
            return None
        log.warning(
            "run %s: the spare job agent (pid %s) died (exit code %s) before it took the run; "
            "starting the run's agent cold",
            run_dir.run_id,
            failed.pid,
            code,
        )
        return platform.spawn_detached(agent_argv(run_dir), cwd=workspace, log_file=run_dir.agent_log)

    def prepare(self, workspace: Path) -> None:
        """The workspace is idle: load a spare agent for its next run (where this server keeps one),
        started on a thread of its own (``SpareAgent.ensure_soon``): this runs on the event loop."""
        if self.spare is not None:
            self.spare.ensure_soon(workspace)

    def release(self) -> None:
        if self.spare is not None:
            self.spare.release()

    def start_failed(self, exit_code: int) -> bool:
        return platform.spawn_failed(exit_code)

    def agent_alive(self, state: RunState | None, process: AgentProcess | None) -> bool:
        return detached_agent_alive(state, process)

    @property
    def revivable(self) -> bool:
        return False

    def revive(self, run_dir: RunDir, state: RunState) -> AgentProcess | None:
        return None  # the trainer died with its agent: nothing runs to be followed

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        """Kill what is left of the trainer's tree (it should have died with its agent)."""
        pid = state.pid
        if not pid:
            return None
        done = None
        recorded = platform.is_recorded_process(pid, state.pid_create_time)  # an unreaped zombie too
        if recorded and not platform.is_zombie(pid):
            platform.kill_tree(pid)
            done = "the trainer's remaining processes were killed"
        if recorded or platform.process_identity(pid) is None:
            # The group id is still the trainer's while its pid names it (a zombie included) or
            # no process at all: a zombie's children left its tree, but never its group.
            platform.kill_group_remnants(pid)
            if recorded and done is None:
                done = "the trainer had exited unreaped; what was left of its process group was killed"
        return done

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        run_dir.request_stop(kill=kill, grace_seconds=grace_seconds, by=by)

    def stop_undelivered(self, spec: RunSpec, state: RunState | None) -> ArenaError | None:
        return None  # the agent holds the trainer: every stop reaches it

    def trainer_started(self, state: RunState) -> bool:
        """The trainer's pid is recorded (by the launcher, or the agent)."""
        return bool(state.pid)

    def local_pids(self, state: RunState) -> list[int]:
        if not state.pid:
            return []
        return [state.pid, *(pid for pid in platform.tree_pids(state.pid) if pid != state.pid)]
