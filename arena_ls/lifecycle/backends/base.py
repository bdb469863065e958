"""The run back-end seam: where a run executes, behind one interface.

A run is started, followed, stopped and re-adopted the same way wherever it
executes. The supervisor talks to a ``RunBackend`` only; which one a run
uses is recorded in its folder (``spec.json`` ``backend``), so any server
that opens the folder later, after a restart or alongside the first,
follows the run through the same back end.

What every back end guarantees (see ``docs/architecture.md``):

- **The run folder is the single source.** A back end starts a *follower*
  for each run: a process on this machine that keeps ``state.json``
  (atomically, with its own pid as ``agentPid``) and ``output.log`` /
  ``output.idx`` current, wherever the trainer itself runs. Servers read
  only these files; none asks the back end for status, logs or progress.
- **Stop requests go through the back end** (``request_stop``); the
  follower records how the run ended.
- **Re-adoption asks the back end**: is this run's follower alive
  (``follower_alive``), and if not, can a new one pick the run up where
  the last left off (``revive``)? A local run cannot be revived (its
  trainer dies with its agent) and is recorded ``lost``; a cluster job
  outlives its follower, and a revived follower catches up its log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from arena_ls import platform
from arena_ls.lifecycle.rundir import RunDir, RunState
from arena_ls.manifest import Job

LOCAL = "local"
"""The back end of a run on this machine (``RunSpec.backend``'s default)."""
CLUSTER_BACKEND = "ray"
"""The back end of a job with ``runOn`` (``arena_ls.lifecycle.backends.ray``; Ray is the one cluster kind)."""


class FollowerProcess(Protocol):
    """A run's follower process, as the server that started it holds it (``subprocess.Popen``)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """Its exit code once it has ended (reaping it), else None."""


class RunBackend(Protocol):
    """Starts, follows, stops and re-adopts runs of one kind (this machine, a cluster)."""

    @property
    def name(self) -> str:
        """What ``spec.json`` records as the run's ``backend``."""

    def start(self, run_dir: RunDir, workspace: Path) -> FollowerProcess:
        """Start the run that ``run_dir``'s spec describes: its follower, which starts the trainer.

        Raises ``OSError`` when the follower cannot be started (nothing ran).
        """

    def start_failed(self, exit_code: int) -> bool:
        """Whether a follower's ``exit_code``, before it recorded a trainer, means the start failed."""

    def start_again(
        self, run_dir: RunDir, workspace: Path, failed: FollowerProcess
    ) -> FollowerProcess | None:
        """The follower ``start`` returned died before it recorded a trainer: another one, or None.

        Only where it is certain that nothing of the run was started (the
        run is never started twice); None: the start failed (1009). Called
        by the supervisor while the run still holds the workspace's lock.
        """

    def prepare(self, workspace: Path) -> None:
        """The workspace is idle: get ready for its next start (the local back end loads a spare agent)."""

    def release(self) -> None:
        """The server is closing, or a run it did not start is active: let go of what ``prepare``
        holds (no run is affected)."""

    def follower_alive(self, state: RunState | None, process: FollowerProcess | None) -> bool:
        """Whether the run's follower lives: ``process`` if this server started it, else ``state``'s."""

    @property
    def revivable(self) -> bool:
        """Whether a run outlives its follower (a cluster job does; a local trainer dies with its agent)."""

    def revive(self, run_dir: RunDir, state: RunState) -> FollowerProcess | None:
        """The follower of an unfinished run is gone: start a new one, or None when the run is over.

        Asked of a ``revivable`` back end only, and by one server per dead
        follower (the one that won the run folder's once-only claim keyed by
        its pid: ``RunDir.claim_once``). The new follower records itself in
        ``state.json`` first, then takes the run up from its files (and from
        wherever the trainer runs) with no output line lost or repeated.
        """

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        """The run is lost: end whatever of its trainer is left; what was done, for the evidence."""

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        """Ask the run to stop (its follower carries the stop out and records the outcome)."""

    def local_pids(self, state: RunState) -> list[int]:
        """The pids on this machine of the run's trainer (roots first); empty for a remote trainer."""


class UnknownBackend:
    """A run recorded with a back end this server does not have (an optional extra not installed).

    Its files are followed as any run's; it is never judged ``lost`` here,
    never revived, and nothing of it is killed: a server that has the back
    end follows it fully.
    """

    def __init__(self, name: str) -> None:
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def start(self, run_dir: RunDir, workspace: Path) -> FollowerProcess:
        raise OSError(f"the run back end {self._name!r} is not available in this server")

    def start_failed(self, exit_code: int) -> bool:
        return False

    def start_again(
        self, run_dir: RunDir, workspace: Path, failed: FollowerProcess
    ) -> FollowerProcess | None:
        return None

    def prepare(self, workspace: Path) -> None:
        return None

    def release(self) -> None:
        return None

    def follower_alive(self, state: RunState | None, process: FollowerProcess | None) -> bool:
        return True  # cannot tell: never lose a run for a missing extra

    @property
    def revivable(self) -> bool:
        return False

    def revive(self, run_dir: RunDir, state: RunState) -> FollowerProcess | None:
        return None

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        return None

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        run_dir.request_stop(kill=kill, grace_seconds=grace_seconds, by=by)  # its follower reads it

    def local_pids(self, state: RunState) -> list[int]:
        return []


class Backends:
    """The back ends this server has, by name: one is chosen per job, and a run's is found by its record.

    The first one given is where a job runs unless it names another (the
    next back end, a cluster, is chosen by the job's ``runOn``).
    """

    def __init__(self, default: RunBackend, *others: RunBackend) -> None:
        self.default = default
        self._by_name = {backend.name: backend for backend in (default, *others)}

    def for_job(self, job: Job) -> RunBackend:
        """Where a new run of ``job`` executes: the default, or the cluster back end (``runOn``)."""
        if job.run_on is not None:
            return self.for_run(CLUSTER_BACKEND)
        return self.default

    def for_run(self, name: str) -> RunBackend:
        """The back end a run's ``spec.json`` records (``UnknownBackend`` when this server lacks it)."""
        return self._by_name.get(name) or UnknownBackend(name)


def detached_follower_alive(state: RunState | None, process: FollowerProcess | None) -> bool:
    """Whether a run's detached follower lives: the one this server started, else the recorded one
    (pid and creation time, so a reused pid is never mistaken for it)."""
    if process is not None and process.poll() is None:
        return True
    if state is None:
        return False
    return platform.is_same_process(state.agent_pid, state.agent_create_time)
