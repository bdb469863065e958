"""The state folder on disk: one folder per run, written atomically.

```
.aide/training/
  .gitignore               "*": written when the server creates the folder (git ignores it all)
  active.lock              the one active run of the workspace (see runlock.py)
  jobs/<jobId>.json        the last checkpoint recorded for a job, across runs
  runs/<runId>/
    spec.json              what to run (written once by the server)
    state.json             the run's state (rewritten atomically by its agent)
    output.log, output.idx the captured output and its index
    stop.json              a stop request (written by a server)
    STOP                   ARENA_STOP_FILE: its appearance asks the trainer to stop
    agent.log              the agent's own diagnostics
```

Everything a server knows can be rebuilt from these files, so any new
server takes over where the last one left off.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from arena_ls import platform
from arena_ls.run.atomicfile import write_json_atomic as write_json_atomic  # re-exported
from arena_ls.run.claim import AGENT_CLAIM
from arena_ls.run.states import RunStatus
from arena_ls.run.stop_marks import mark_stop, with_marks
from arena_ls.validation import finite

log = logging.getLogger(__name__)

T = TypeVar("T")

_converter = cattrs.Converter()


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _register_camel(cls: type) -> None:
    fields = attrs.fields(cls)
    overrides = {f.name: override(rename=_camel(f.name)) for f in fields}
    _converter.register_unstructure_hook(
        cls,
        make_dict_unstructure_fn(cls, _converter, **overrides),  # type: ignore[arg-type]
    )
    _converter.register_structure_hook(
        cls,
        make_dict_structure_fn(cls, _converter, **overrides),  # type: ignore[arg-type]
    )


@attrs.define
class CheckpointRecord:
    step: int
    path: str
    at: float
    run_id: str | None = None
    """The run that announced it (the job's record names it: ``JobInfo.lastCheckpoint.runId``)."""
    bytes: int | None = None
    """The file's size as announced (contract 8.2; the kit fills it): verified before a resume."""
    sha256: str | None = None
    """The file's SHA-256 as announced (lowercase hex): verified before a resume."""


@attrs.define
class SkippedCheckpoint:
    """A checkpoint a resume did not take: ``RunInfo.resumedFrom.skipped[]`` (contract 8.2)."""

    step: int
    path: str
    why: str


@attrs.define
class ResumedFrom:
    """``RunInfo.resumedFrom``: the checkpoint the current attempt resumed from, how it was
    verified (``sha256``, ``bytes`` or ``exists``) and the newer ones skipped, with why."""

    step: int
    path: str
    verified: str
    skipped: list[SkippedCheckpoint] = attrs.field(factory=list)


@attrs.define
class Failure:
    kind: str
    evidence: str


@attrs.define
class ClusterSpec:
    """Where a cluster run runs (contract 6.2): never the token itself, only where to read it."""

    name: str
    kind: str
    address: str
    token_file: str | None = None
    resources: dict[str, float] = attrs.field(factory=dict)
    """``gpus``, ``cpus``, ``memoryMb`` as the manifest's ``resources`` gives them."""


@attrs.define
class ClusterRecord:
    """What a cluster run's agent records: the submissions and the watchdog's position."""

    name: str
    kind: str
    address: str
    submission_id: str | None = None
    submissions: list[str] = attrs.field(factory=list)
    accepted: str | None = None
    """The last submission Ray accepted."""
    package: str | None = None
    """The ``working_dir`` package URI every submission of the run uses."""
    restarts_left: int | None = None
    relaunch_step: int | None = None
    relaunched: bool = False
    """False until the watchdog's first relaunch (``relaunch_step`` means nothing before)."""
    stop_undelivered: str | None = None
    """A stop was asked for but the cluster could not be told (why): the agent asks again at
    each poll, and ``arena/stop`` answers at once that the cluster is unreachable."""


@attrs.define
class PowerSpec:
    """The power rule and the relaunch gate's thresholds, from the settings at the start (contract 7.3).

    In the spec because the agent enforces them while no server runs.
    """

    on_battery: str = "stop"
    grace_seconds: float = 60.0
    resume_on_ac: bool = True
    require_plugged_in: bool = True
    min_free_ram_mb: int = 5120
    keep_awake: bool = True
    """``power.keepAwake`` at the start: the agent keeps the machine awake while the run trains."""


@attrs.define
class NotifySpec:
    """``notify.*`` at the start (contract 8.3): the agent tells the person, with no server running."""

    desktop: bool = True
    command: list[str] | None = None


@attrs.define
class BootRecord:
    """The machine's boot a run was launched in (contract 8.3; ``lifecycle/reboot.py``)."""

    boot_id: str | None = None
    boot_time: float | None = None


@attrs.define
class RollbackSpec:
    """Loss-spike rollback (contract 8.2), from the settings at the start: ``insights.lossSpikeAction``,
    ``rollbackStepsBefore``, ``rollbackSkipBatches``, ``rollbackMax`` and the spike's thresholds."""

    action: str = "warn"
    steps_before: int = 100
    skip_batches: int = 200
    max_rollbacks: int = 3
    window: int = 20
    mads: float = 8.0
    min_jump: float = 0.25


@attrs.define
class RunSpec:
    """What a run executes; written once by the server before the agent starts."""

    run_id: str
    job_id: str
    job_name: str
    kind: str
    argv: list[str]
    cwd: str
    env: dict[str, str] = attrs.field(factory=dict)
    resume_args: list[str] = attrs.field(factory=list)
    stop_method: str = "file"
    grace_seconds: float = 120.0
    max_restarts: int = 0
    backoff_seconds: float = 5.0
    progress_pattern: str | None = None
    checkpoint_pattern: str | None = None
    stall_seconds: float = 600.0
    """``watchdog.stallSeconds``: the longest silence before a stall (contract 8.2, ``stall``)."""
    stall_factor: float = 10.0
    """``watchdog.stallFactor``: the stall threshold in median step times."""
    stall_min_seconds: float = 120.0
    """``watchdog.stallMinSeconds``: the shortest silence that is a stall."""
    stall_action: str = "warn"
    """``watchdog.stallAction``: ``warn`` or ``restart`` (an idle stalled trainer is relaunched)."""
    resumed_from_step: int | None = None
    created_at: float = attrs.field(factory=time.time)
    backend: str = "local"
    """Where the run executes: the name of its back end (``arena_ls.lifecycle.backends``)."""
    cluster: ClusterSpec | None = None
    """None: this machine; else the cluster the run is submitted to (``backend`` ``ray``)."""
    job_checkpoint: CheckpointRecord | None = None
    """The job's last known checkpoint as this run takes the job over (contract 7.1): the job's
    record when the run resumes from it; None on a fresh start, or a start at another step a
    person confirmed. The relaunch policy never relaunches from step 0 while it is known."""
    checkpoint_paths: list[str] = attrs.field(factory=list)
    """Paths any run of the job announced (newest last): a crash with no known checkpoint
    looks for them (``resume-unknown``) before a relaunch from step 0."""
    exec_check: dict[str, Any] | None = None
    """The gated paths, checked again right before each exec (``agent/exec_check.py``)."""
    allowed_roots: list[str] = attrs.field(factory=list)
    """``allowedRoots``: the workspace, then the manifest's ``roots`` (absolute, resolved) at the
    start: the folders the run's script, cwd and path arguments may lie in (contract 7.3)."""
    power: PowerSpec | None = None
    """None: no power rule, no relaunch gate (a spec written before them, a cluster run)."""
    log_max_run_mb: float = 2048.0
    """``logs.maxRunMb`` at the start: the agent's writer caps the run's log to it (0: no cap)."""
    notify: NotifySpec | None = None
    """None: no notifications (a spec written before them)."""
    boot: BootRecord | None = None
    """The boot of this machine the run was launched in (None: a cluster run, an older spec)."""
    record: dict[str, Any] | None = None
    """``RunInfo.record``: the code, interpreter, command and settings of the start (``runrecord.py``)."""
    checkpoint_history: int = 8
    """``checkpoint.history``: how many announced checkpoints the job's record keeps (contract 8.2)."""
    rollback: RollbackSpec | None = None
    """None: no rollback (a spec written before it, a task, a cluster run)."""
    job_history: list[CheckpointRecord] = attrs.field(factory=list)
    """The job's recorded checkpoints (oldest first) when this run resumes from the job's last one
    (empty on a fresh start): with the run's own announcements, what a resume may fall back to."""


@attrs.define
class RelaunchRecord:
    """One relaunch of a run by its watchdog, as a person compares them (``RunInfo.relaunches``)."""

    at: float
    """When the watchdog decided it (its ``restarting`` line)."""
    crashed_at: float | None
    """When the trainer before it ended."""
    from_step: int | None
    """The checkpoint step it resumed from (None: from scratch)."""
    steps_lost: int | None
    """Steps the trainer had reached past ``from_step`` when it ended (None: no step known)."""
    downtime_seconds: float | None = None
    """From the end of the trainer to the relaunched trainer's first progress; None until then."""


MAX_RELAUNCH_RECORDS = 100
"""A run keeps its last this many relaunch records."""


@attrs.define
class RunState:
    """A run's state, as its agent records it."""

    run_id: str
    job_id: str
    status: RunStatus = RunStatus.STARTING
    pid: int | None = None
    pid_create_time: float | None = None
    agent_pid: int | None = None
    agent_create_time: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    stopped_by: str | None = None
    failure: Failure | None = None
    restarts: int = 0
    step: int | None = None
    total_steps: int | None = None
    loss: float | None = None
    last_checkpoint: CheckpointRecord | None = None
    stalled: bool = False
    argv: list[str] = attrs.field(factory=list)
    next_launch_at: float | None = None
    updated_at: float = attrs.field(factory=time.time)
    cluster: ClusterRecord | None = None
    generation: int = 0
    """Counts the writes of this state: readers never take an older state for a newer one."""
    waiting_for: list[dict[str, Any]] | None = None
    """``waitingFor``: the failing pre-flight checks a relaunch waits on (contract 7.3), or None."""
    keep_awake: bool | None = None
    """``keepAwake`` (contract 8.3): the agent keeps the machine awake (True), was told not to or the
    run is not a ``train`` run of this machine (False), or could not (None: the reason is in the log)."""
    relaunches: list[RelaunchRecord] = attrs.field(factory=list)
    """The watchdog's relaunches of the run, oldest first (the last ``MAX_RELAUNCH_RECORDS``)."""
    resumed_from: ResumedFrom | None = None
    """``resumedFrom``: the verified checkpoint the current attempt resumed from (contract 8.2)."""
    rollbacks: int = 0
    """Loss-spike rollbacks of this run so far (at most ``insights.rollbackMax``)."""


for _cls in (
    CheckpointRecord,
    SkippedCheckpoint,
    ResumedFrom,
    Failure,
    ClusterSpec,
    ClusterRecord,
    PowerSpec,
    NotifySpec,
    BootRecord,
    RelaunchRecord,
    RollbackSpec,
    RunSpec,
    RunState,
):
    _register_camel(_cls)


class CorruptState(ValueError):
    """A state or spec file that cannot be read (truncated, not JSON, wrong shape)."""


class StateBusy(OSError):
    """A state file another process held open for longer than the retries (Windows): not damage.

    Whoever gets it tries again later; it never marks a run skipped or lost.
    """


def read_json(path: Path) -> Any:
    """A JSON file's content; ``StateBusy`` when it stays held open, ``CorruptState`` when damaged."""
    try:
        data = platform.read_bytes_shared(path)
    except FileNotFoundError:
        raise
    except OSError as error:
        if platform.is_sharing_violation(error):
            raise StateBusy(error.errno, f"{path}: held open by another process: {error}") from error
        raise CorruptState(f"{path}: {error}") from error
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        raise CorruptState(f"{path}: {error}") from error


@attrs.define
class RunDir:
    """One run's folder and the files in it."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def spec_path(self) -> Path:
        return self.path / "spec.json"

    @property
    def state_path(self) -> Path:
        return self.path / "state.json"

    @property
    def stop_request_path(self) -> Path:
        return self.path / "stop.json"

    @property
    def stop_file(self) -> Path:
        return self.path / "STOP"

    @property
    def log_path(self) -> Path:
        return self.path / "output.log"

    @property
    def agent_log(self) -> Path:
        return self.path / "agent.log"

    def write_spec(self, spec: RunSpec) -> None:
        write_json_atomic(self.spec_path, _converter.unstructure(spec))

    def read_spec(self) -> RunSpec:
        try:
            return _converter.structure(read_json(self.spec_path), RunSpec)
        except (cattrs.BaseValidationError, TypeError, KeyError, ValueError, AttributeError) as error:
            if isinstance(error, CorruptState):
                raise
            raise CorruptState(f"{self.spec_path}: {error}") from error

    def write_state(self, state: RunState) -> None:
        write_json_atomic(self.state_path, self.state_payload(state))

    @staticmethod
    def state_payload(state: RunState) -> Any:
        """What ``write_state`` writes: the state stamped with the time and its next generation."""
        state.updated_at = time.time()
        state.generation += 1
        state.loss = finite(state.loss)
        return _converter.unstructure(state)

    def read_state(self) -> RunState:
        try:
            return _converter.structure(read_json(self.state_path), RunState)
        except (cattrs.BaseValidationError, TypeError, KeyError, ValueError, AttributeError) as error:
            if isinstance(error, CorruptState):
                raise
            raise CorruptState(f"{self.state_path}: {error}") from error

    def state_signature(self) -> tuple[int, int, int, int] | None:
        """Changes with every write of state.json (see ``platform.file_signature``)."""
        return platform.file_signature(self.state_path)

    def request_stop(self, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        """Ask the agent to stop the run (it acts on the first request only)."""
        request = {"kill": kill, "graceSeconds": grace_seconds, "by": by, "at": time.time()}
        try:
            write_json_atomic(self.stop_request_path, request)
        except OSError as error:
            # A full disk: empty files need no data block; their names say what is asked.
            log.warning("could not write %s (%s); asking with empty files", self.stop_request_path, error)
            try:
                mark_stop(self.path, kill=kill, grace_seconds=grace_seconds)
            except OSError as again:
                log.warning("could not ask for the stop with empty files either (%s)", again)

    @property
    def agent_claimed(self) -> bool:
        """Whether an agent has taken the run (``trainer_start.claim_run``): it may have started one."""
        return (self.path / AGENT_CLAIM).exists()

    def claim_once(self, what: str) -> bool:
        """An exclusive, once-only claim on the run among every server of the workspace."""
        try:
            fd = os.open(self.path / f".{what}.claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with contextlib.suppress(OSError):
            os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True

    def claim_age(self, what: str) -> float:
        """Seconds since claim ``what`` was made (0 when it cannot be read: judged young)."""
        try:
            return max(0.0, time.time() - (self.path / f".{what}.claim").stat().st_mtime)
        except OSError:
            return 0.0

    def drop_claim(self, what: str) -> None:
        """Give a claim up (whoever claims it next wins it)."""
        with contextlib.suppress(OSError):
            os.unlink(self.path / f".{what}.claim")

    def read_stop_request(self) -> dict[str, Any] | None:
        """The stop request, if any; an empty ``stop.json`` (written on a full disk) is one too, and
        the marks beside it say what it asks (``stop_marks``)."""
        try:
            if self.stop_request_path.stat().st_size == 0:
                return with_marks(self.path, {})
            payload = read_json(self.stop_request_path)
        except (FileNotFoundError, CorruptState, StateBusy):
            return None
        return with_marks(self.path, payload if isinstance(payload, dict) else {})


MAX_STEP = 10**12
"""A recorded step beyond this is not a step any trainer reached: the record is damaged."""


def structure(value: Any, cls: type[T]) -> T:
    """``value`` (plain JSON) as ``cls``, by the run folder's converter (camelCase keys)."""
    return _converter.structure(value, cls)


def unstructure(value: Any) -> Any:
    return _converter.unstructure(value)
