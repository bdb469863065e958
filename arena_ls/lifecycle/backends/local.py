"""The local back end: a run is a detached job agent on this machine, which owns the trainer.

The server spawns ``python -m arena_ls.lifecycle.launch RUN_DIR`` detached
(it outlives the server and the editor), or hands the run to the spare
agent it loaded while the workspace was idle (``spare.py``; POSIX); the
agent starts the trainer,
captures its output and records its state (``arena_ls.lifecycle.agent``).
The trainer dies with its agent (Linux: ``PR_SET_PDEATHSIG``; Windows: a
kill-on-close job object), so a run whose agent is gone is over: it cannot
be revived, only recorded ``lost`` and whatever is left of it killed.
"""

from __future__ import annotations

from pathlib import Path

from arena_ls import platform
from arena_ls.lifecycle.backends.base import LOCAL, FollowerProcess, detached_follower_alive
from arena_ls.lifecycle.rundir import RunDir, RunState
from arena_ls.lifecycle.spare import SpareAgent, agent_argv


class LocalBackend:
    """``RunBackend`` for runs on this machine."""

    def __init__(self, spare: SpareAgent | None = None) -> None:
        self.spare = spare
        """The agent loaded ahead of the next run, where the server keeps one (None: every start is cold)."""

    @property
    def name(self) -> str:
        return LOCAL

    def start(self, run_dir: RunDir, workspace: Path) -> FollowerProcess:
        agent = self.spare.take(run_dir, workspace) if self.spare is not None else None
        if agent is not None:
            return agent
        return platform.spawn_detached(agent_argv(run_dir), cwd=workspace, log_file=run_dir.agent_log)

    def prepare(self, workspace: Path) -> None:
        """The workspace is idle: load a spare agent for its next run (where this server keeps one)."""
        if self.spare is not None:
            self.spare.ensure(workspace)

    def release(self) -> None:
        if self.spare is not None:
            self.spare.release()

    def start_failed(self, exit_code: int) -> bool:
        return platform.spawn_failed(exit_code)

    def follower_alive(self, state: RunState | None, process: FollowerProcess | None) -> bool:
        return detached_follower_alive(state, process)

    @property
    def revivable(self) -> bool:
        return False

    def revive(self, run_dir: RunDir, state: RunState) -> FollowerProcess | None:
        return None  # the trainer died with its agent: nothing runs to be followed

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        """Kill what is left of the trainer's tree (it should have died with its agent)."""
        pid = state.pid
        if not pid:
            return None
        done = None
        if platform.is_same_process(pid, state.pid_create_time):
            platform.kill_tree(pid)
            done = "the trainer's remaining processes were killed"
        if platform.process_identity(pid) is None:
            # The group id is still the trainer's only while no new process has its pid.
            platform.kill_group_remnants(pid)
        return done

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        run_dir.request_stop(kill=kill, grace_seconds=grace_seconds, by=by)

    def local_pids(self, state: RunState) -> list[int]:
        if not state.pid:
            return []
        return [state.pid, *(pid for pid in platform.tree_pids(state.pid) if pid != state.pid)]
