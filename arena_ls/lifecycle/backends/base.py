"""The run back-end seam: where a run executes, behind one interface.

A run is started, followed, stopped and re-adopted the same way wherever it
executes. The supervisor talks to a ``RunBackend`` only, and knows no
implementation: the server composes the list (``protocol/backends.py``:
``LocalBackend`` here, ``cluster.backend.RayBackend``), the supervisor asks
it which back end ``takes`` a job, and that back end's ``plan`` says what the
start runs with. Which one a run uses is recorded in its folder
(``spec.json`` ``backend``), so any server that opens the folder later,
after a restart or alongside the first, follows the run through the same
back end.

What every back end guarantees (see ``docs/architecture.md``):

- **The run folder is the single source.** A back end starts an *agent*
  for each run: a process on this machine that keeps ``state.json``
  (atomically, with its own pid as ``agentPid``) and ``output.log`` /
  ``output.idx`` current, wherever the trainer itself runs. Servers read
  only these files; none asks the back end for status, logs or progress.
- **Stop requests go through the back end** (``request_stop``); the
  agent records how the run ended, or, where the trainer runs elsewhere,
  that it could not pass the stop on (``stop_undelivered``: the refusal the
  stop answers with).
- **The back end reads its own part of the state**: whether a start has a
  trainer (``trainer_started``: a pid here, a submission Ray accepted), so
  the supervisor never looks at a back end's fields.
- **Re-adoption asks the back end**: is this run's agent alive
  (``agent_alive``), and if not, can a new one pick the run up where
  the last left off (``revive``)? A local run cannot be revived (its
  trainer dies with its agent) and is recorded ``lost``; a cluster job
  outlives its agent, and a revived agent catches up its log.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from arena_ls import platform
from arena_ls.errors import ArenaError
from arena_ls.lifecycle.rundir import ClusterSpec, RunDir, RunSpec, RunState
from arena_ls.manifest import Job, ManifestResult
from arena_ls.settings import Settings

LOCAL = "local"
"""The back end of a run on this machine (``RunSpec.backend``'s default)."""

Check = dict[str, Any]
"""One pre-flight check as the wire has it: ``{name, ok, message}``."""


@attrs.frozen
class RunPlan:
    """What a back end decides for one start of a job, from the request's manifest snapshot.

    Built once per start (``RunBackend.plan``, fast: no network, no process),
    so that the interpreter, the spec and the pre-flight of one start agree.
    """

    python: tuple[str, ...]
    """What ``{python}`` means for the job (the workspace's interpreter, or the cluster's)."""
    runs_here: bool = True
    """The trainer runs on this machine: the exec check and the power rule apply to it."""
    cluster: ClusterSpec | None = None
    """The back end's part of the run's spec (``spec.json`` ``cluster``)."""
    replaces_checks: frozenset[str] = frozenset()
    """This machine's pre-flight checks that mean nothing for this run (they are left out)."""
    own_check: Callable[[], Check] | None = None
    """The back end's own pre-flight check; it blocks (an unreachable head takes seconds), so the
    supervisor runs it in a worker thread."""

    def checks(self, local: list[Check], own: Check | None) -> list[Check]:
        """The run's pre-flight: the back end's own check first, then this machine's that apply."""
        kept = [check for check in local if check.get("name") not in self.replaces_checks]
        return kept if own is None else [own, *kept]


class AgentProcess(Protocol):
    """A run's agent process, as the server that started it holds it (``subprocess.Popen``)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """Its exit code once it has ended (reaping it), else None."""


class RunBackend(Protocol):
    """Starts, follows, stops and re-adopts runs of one kind (this machine, a cluster)."""

    @property
    def name(self) -> str:
        """What ``spec.json`` records as the run's ``backend``."""

    def takes(self, job: Job) -> bool:
        """Whether a new run of ``job`` executes here (the supervisor asks each back end in turn)."""

    def plan(self, job: Job, manifest: ManifestResult, settings: Settings) -> RunPlan:
        """What a start of ``job`` runs with here, read from ``manifest`` (the request's snapshot)."""

    def start(self, run_dir: RunDir, workspace: Path) -> AgentProcess:
        """Start the run that ``run_dir``'s spec describes: its agent, which starts the trainer.

        Raises ``OSError`` when the agent cannot be started (nothing ran).
        """

    def start_failed(self, exit_code: int) -> bool:
        """Whether an agent's ``exit_code``, before it recorded a trainer, means the start failed."""

    def start_again(self, run_dir: RunDir, workspace: Path, failed: AgentProcess) -> AgentProcess | None:
        """The agent ``start`` returned died before it recorded a trainer: another one, or None.

        Only where it is certain that nothing of the run was started (the
        run is never started twice); None: the start failed (1009). Called
        by the supervisor while the run still holds the workspace's lock.
        """

    def prepare(self, workspace: Path) -> None:
        """The workspace is idle: get ready for its next start (the local back end loads a spare agent)."""

    def release(self) -> None:
        """The server is closing, or a run it did not start is active: let go of what ``prepare``
        holds (no run is affected)."""

    def agent_alive(self, state: RunState | None, process: AgentProcess | None) -> bool:
        """Whether the run's agent lives: ``process`` if this server started it, else ``state``'s."""

    @property
    def revivable(self) -> bool:
        """Whether a run outlives its agent (a cluster job does; a local trainer dies with its agent)."""

    def revive(self, run_dir: RunDir, state: RunState) -> AgentProcess | None:
        """The agent of an unfinished run is gone: start a new one, or None when the run is over.

        Asked of a ``revivable`` back end only, and by one server per dead
        agent (the one that won the run folder's once-only claim keyed by
        its pid: ``RunDir.claim_once``). The new agent records itself in
        ``state.json`` first, then takes the run up from its files (and from
        wherever the trainer runs) with no output line lost or repeated.
        """

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        """The run is lost: end whatever of its trainer is left; what was done, for the evidence."""

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        """Ask the run to stop (its agent carries the stop out and records the outcome)."""

    def stop_undelivered(self, spec: RunSpec, state: RunState | None) -> ArenaError | None:
        """The run's agent could not pass a stop on to where the trainer runs: the refusal a
        waiting ``arena/stop`` answers with at once (the agent keeps asking). None while it
        could, or has not tried; always None where the agent holds the trainer itself."""

    def trainer_started(self, state: RunState) -> bool:
        """Whether ``state`` records a started trainer (a start's answer waits for it)."""

    def local_pids(self, state: RunState) -> list[int]:
        """The pids on this machine of the run's trainer (roots first); empty for a remote trainer."""


class UnknownBackend:
    """A run recorded with a back end this server does not have (an optional extra not installed).

    Its files are followed as any run's; it is never judged ``lost`` here,
    never revived, and nothing of it is killed: a server that has the back
    end follows it fully.
    """

    def __init__(self, name: str, why: str | None = None) -> None:
        self._name = name
        self._why = why or f"the run back end {name!r} is not available in this server"

    @property
    def name(self) -> str:
        return self._name

    def takes(self, job: Job) -> bool:
        return False

    def plan(self, job: Job, manifest: ManifestResult, settings: Settings) -> RunPlan:
        return RunPlan(python=settings.python, runs_here=False)  # its start fails (1009): nothing runs

    def start(self, run_dir: RunDir, workspace: Path) -> AgentProcess:
        raise OSError(self._why)

    def start_failed(self, exit_code: int) -> bool:
        return False

    def start_again(self, run_dir: RunDir, workspace: Path, failed: AgentProcess) -> AgentProcess | None:
        return None

    def prepare(self, workspace: Path) -> None:
        return None

    def release(self) -> None:
        return None

    def agent_alive(self, state: RunState | None, process: AgentProcess | None) -> bool:
        return True  # cannot tell: never lose a run for a missing extra

    @property
    def revivable(self) -> bool:
        return False

    def revive(self, run_dir: RunDir, state: RunState) -> AgentProcess | None:
        return None

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        return None

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        run_dir.request_stop(kill=kill, grace_seconds=grace_seconds, by=by)  # its agent reads it

    def stop_undelivered(self, spec: RunSpec, state: RunState | None) -> ArenaError | None:
        return None  # its agent records how the stop ended: the stop waits for that

    def trainer_started(self, state: RunState) -> bool:
        return bool(state.pid)

    def local_pids(self, state: RunState) -> list[int]:
        return []


class Backends:
    """The back ends this server has, by name: one is chosen per job, and a run's is found by its record.

    Composed where the server is built (``arena_ls/protocol/backends.py``).
    The first one given is the default: it gets the workspace ready while
    it is idle (a spare agent). A job runs on the first back end that
    ``takes`` it.
    """

    def __init__(self, default: RunBackend, *others: RunBackend) -> None:
        self.default = default
        self._in_order = (default, *others)
        self._by_name = {backend.name: backend for backend in self._in_order}

    def for_job(self, job: Job) -> RunBackend:
        """Where a new run of ``job`` executes: the first back end that takes it.

        None takes it (a ``runOn`` job in a server without the cluster back end):
        an ``UnknownBackend``, whose start fails (1009) rather than run the job
        somewhere it did not ask for.
        """
        for backend in self._in_order:
            if backend.takes(job):
                return backend
        where = f" (runOn {job.run_on!r})" if job.run_on is not None else ""
        return UnknownBackend("none", f"no run back end of this server takes job {job.id!r}{where}")

    def for_run(self, name: str) -> RunBackend:
        """The back end a run's ``spec.json`` records (``UnknownBackend`` when this server lacks it)."""
        return self._by_name.get(name) or UnknownBackend(name)


def detached_agent_alive(state: RunState | None, process: AgentProcess | None) -> bool:
    """Whether a run's detached agent lives: the one this server started, else the recorded one
    (pid and creation time, so a reused pid is never mistaken for it)."""
    if process is not None and process.poll() is None:
        return True
    if state is None:
        return False
    return platform.is_same_process(state.agent_pid, state.agent_create_time)
