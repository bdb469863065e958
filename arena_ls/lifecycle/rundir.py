"""The state folder on disk: one folder per run, written atomically.

```
.aide/training/
  .gitignore               "*": written when the server creates the folder (git ignores it all)
  active.lock              the one active run of the workspace (its runId)
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
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from arena_ls.lifecycle.states import RunStatus

log = logging.getLogger(__name__)

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


@attrs.define
class Failure:
    kind: str
    evidence: str


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
    resumed_from_step: int | None = None
    created_at: float = attrs.field(factory=time.time)


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


for _cls in (CheckpointRecord, Failure, RunSpec, RunState):
    _register_camel(_cls)


class CorruptState(ValueError):
    """A state or spec file that cannot be read (truncated, not JSON, wrong shape)."""


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half.

    Temporary file in the same folder, fsync, then rename over the target.
    """
    data = json.dumps(payload, indent=1, allow_nan=False, default=str).encode()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise
    except (OSError, ValueError, RecursionError) as error:
        raise CorruptState(f"{path}: {error}") from error


def _finite(value: float | None) -> float | None:
    if value is None or value != value or value in (float("inf"), float("-inf")):
        return None
    return value


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
        except (cattrs.BaseValidationError, TypeError, KeyError, ValueError) as error:
            if isinstance(error, CorruptState):
                raise
            raise CorruptState(f"{self.spec_path}: {error}") from error

    def write_state(self, state: RunState) -> None:
        state.updated_at = time.time()
        state.loss = _finite(state.loss)
        write_json_atomic(self.state_path, _converter.unstructure(state))

    def read_state(self) -> RunState:
        try:
            return _converter.structure(read_json(self.state_path), RunState)
        except (cattrs.BaseValidationError, TypeError, KeyError, ValueError) as error:
            if isinstance(error, CorruptState):
                raise
            raise CorruptState(f"{self.state_path}: {error}") from error

    def state_mtime(self) -> float:
        try:
            return self.state_path.stat().st_mtime_ns / 1e9
        except OSError:
            return 0.0

    def request_stop(self, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        """Ask the agent to stop the run (it acts on the first request only)."""
        request = {"kill": kill, "graceSeconds": grace_seconds, "by": by, "at": time.time()}
        write_json_atomic(self.stop_request_path, request)

    def read_stop_request(self) -> dict[str, Any] | None:
        try:
            payload = read_json(self.stop_request_path)
        except (FileNotFoundError, CorruptState):
            return None
        return payload if isinstance(payload, dict) else {}


STATE_GITIGNORE = (
    "# Written by arena-ls when it created this state folder: its runs, logs and locks\n"
    "# are not sources, so git ignores all of it. Delete this file to have git see them.\n"
    "*\n"
)


def make_state_folder(root: Path) -> None:
    """Create the state folder; when this call creates it, also a ``.gitignore`` of ``*``
    in it, so it never shows in the workspace's ``git status``. A folder that already
    existed (a ``stateDir`` the user chose, the workspace itself) is left as it is."""
    created = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    if created:
        with contextlib.suppress(OSError):
            (root / ".gitignore").write_text(STATE_GITIGNORE, encoding="utf-8")


@attrs.define
class StateFolder:
    """The workspace's state folder."""

    root: Path

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    @property
    def lock_path(self) -> Path:
        return self.root / "active.lock"

    def ensure(self) -> None:
        make_state_folder(self.root)
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        (self.root / "jobs").mkdir(parents=True, exist_ok=True)

    def new_run(self, job_id: str) -> RunDir:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        run_id = f"{job_id}-{stamp}-{secrets.token_hex(3)}"
        path = self.runs_dir / run_id
        path.mkdir(parents=True)
        return RunDir(path)

    def run(self, run_id: str) -> RunDir | None:
        if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
            return None
        path = self.runs_dir / run_id
        return RunDir(path) if path.is_dir() else None

    def list_runs(self) -> list[RunDir]:
        """Every run folder, oldest first (run ids sort by creation time)."""
        try:
            entries = [p for p in self.runs_dir.iterdir() if p.is_dir()]
        except FileNotFoundError:
            return []
        entries.sort(key=lambda p: (_created(p), p.name))
        return [RunDir(p) for p in entries]

    # -- the workspace's one active run -------------------------------------------------

    def try_lock(self, run_id: str) -> bool:
        """Claim the workspace for a run; False when another run holds it."""
        self.ensure()
        try:
            fd = os.open(self.lock_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(run_id)
        return True

    def lock_holder(self) -> str | None:
        try:
            return self.lock_path.read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None

    def release_lock(self, run_id: str) -> None:
        """Release the lock if ``run_id`` holds it (never another run's lock)."""
        if self.lock_holder() == run_id:
            with contextlib.suppress(FileNotFoundError):
                self.lock_path.unlink()

    def break_stale_lock(self, holder: str) -> None:
        """Remove a lock whose run is over; renaming first makes it race-free."""
        stale = self.root / f"active.lock.stale-{secrets.token_hex(4)}"
        try:
            os.replace(self.lock_path, stale)
        except FileNotFoundError:
            return
        try:
            if stale.read_text().strip() != holder:  # someone re-locked meanwhile
                os.replace(stale, self.lock_path)
                return
        except OSError:
            pass
        with contextlib.suppress(OSError):
            stale.unlink()

    # -- checkpoints across runs ---------------------------------------------------------

    def record_job_checkpoint(self, job_id: str, checkpoint: CheckpointRecord) -> None:
        (self.root / "jobs").mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.root / "jobs" / f"{job_id}.json", _converter.unstructure(checkpoint))

    def job_checkpoint(self, job_id: str) -> CheckpointRecord | None:
        try:
            payload = read_json(self.root / "jobs" / f"{job_id}.json")
            return _converter.structure(payload, CheckpointRecord)
        except (FileNotFoundError, CorruptState, cattrs.BaseValidationError, TypeError, KeyError):
            return None


def _created(path: Path) -> float:
    try:
        return (path / "spec.json").stat().st_mtime
    except OSError:
        return 0.0


def unstructure(value: Any) -> Any:
    return _converter.unstructure(value)
