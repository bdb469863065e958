"""The workspace's one active run: how a run is created, and how ``active.lock`` is held and broken.

Every server of a workspace, and every agent, goes through this module; no
other code creates a run folder or touches the lock.

- **A run appears whole.** It is built under ``runs/.new-<runId>`` with its
  ``spec.json`` and renamed into ``runs/<runId>`` only once the lock is
  taken, so no reader ever sees a run folder without its spec.
- **The lock names its holder.** ``active.lock`` holds JSON: the run id, the
  pid and creation time of the process that took it (a server), and once
  the agent is spawned, the agent's pid and creation time. It is created
  with its content in one step (a hard link of a written file), so it is
  never seen empty.
- **A lock is broken only when its holder is provably gone:** its run has a
  final status, or the agent that owns it is dead (pid *and* creation time),
  or it never got an agent and its creator is dead past a grace period. Not
  knowing the run yet is never a reason (the run may be a moment old).
- **One claimant at a time.** Judging, breaking and taking the lock happen
  under an OS file lock (``.runlock``), which the kernel releases if its
  holder dies; two servers cannot both break the same stale lock and both
  win.

``judge`` holds the rules as a pure function (unit-tested in
``tests/lifecycle/test_runlock.py``); ``RunLock`` applies them to the files.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import attrs

from arena_ls import platform
from arena_ls.run.rundir import CorruptState, RunDir, RunSpec
from arena_ls.run.state_folder import StateFolder

log = logging.getLogger(__name__)

STAGING_PREFIX = ".new-"
"""A run being built: ``runs/.new-<runId>`` (readers skip names starting with a dot)."""
WRITE_GRACE = 5.0
"""An unreadable lock younger than this may be one being written (only without hard links)."""
START_GRACE = 30.0
"""A run with no agent recorded, whose creator is gone, may still have an agent starting this long."""
CREATE_GRACE = 60.0
"""A live creator that has neither recorded an agent nor written a state for this long has failed."""
MUTEX_WAIT = 5.0
"""The longest a claimant waits for another one's turn (each turn takes milliseconds)."""
MAX_RUN_ID = 200


class Verdict(enum.Enum):
    HELD = "held"
    """The holder is alive, or may be: the lock stands."""
    STALE = "stale"
    """The holder is provably gone: the lock may be broken."""
    DAMAGED = "damaged"
    """The lock is not a lock (a directory, garbage): it is moved aside and reported."""


@attrs.frozen
class LockRecord:
    """What ``active.lock`` says."""

    run_id: str
    pid: int | None = None
    create_time: float | None = None
    agent_pid: int | None = None
    agent_create_time: float | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "runId": self.run_id,
                "pid": self.pid,
                "createTime": self.create_time,
                "agentPid": self.agent_pid,
                "agentCreateTime": self.agent_create_time,
            }
        ).encode()


@attrs.frozen
class HolderFacts:
    """What the files say about the lock's run."""

    run_exists: bool
    """Its folder (or its staging folder) exists."""
    final: bool = False
    """Its state says it has ended."""
    agent_pid: int | None = None
    agent_create_time: float | None = None
    """The agent its state records (None when there is no readable state)."""
    outlives_agent: bool = False
    """The run goes on without its agent (a cluster job: its state records the cluster); a gone
    agent is then replaced by a server, not a reason to break the lock."""


@attrs.frozen
class Judgement:
    verdict: Verdict
    run_id: str | None
    reason: str


Alive = Callable[[int | None, float | None], bool]
"""Whether the process with this pid and creation time is alive (``platform.is_same_process``)."""


class _Process(Protocol):
    @property
    def pid(self) -> int: ...


P = TypeVar("P", bound=_Process)
"""A run's agent as ``RunLock.replace_agent`` records it (a ``subprocess.Popen``)."""


def valid_run_id(text: str) -> bool:
    """A run id as this module makes them: a plain folder name."""
    return (
        0 < len(text) <= MAX_RUN_ID
        and not text.startswith(".")
        and all(c.isalnum() or c in "-_." for c in text)
    )


def parse_lock(raw: bytes) -> LockRecord | None:
    """The lock's record, or None when it is not one (empty, garbage, wrong shape).

    A plain run id (the format before the lock named its holder) is accepted.
    """
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    if valid_run_id(text):
        return LockRecord(run_id=text)
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("runId"), str):
        return None
    if not valid_run_id(payload["runId"]):
        return None
    return LockRecord(
        run_id=payload["runId"],
        pid=_int_or_none(payload.get("pid")),
        create_time=_float_or_none(payload.get("createTime")),
        agent_pid=_int_or_none(payload.get("agentPid")),
        agent_create_time=_float_or_none(payload.get("agentCreateTime")),
    )


def judge(lock: LockRecord | None, lock_age: float, facts: HolderFacts, alive: Alive) -> Judgement:
    """May the lock be broken? The rules, in order (pure: no file, no process is looked at).

    1. Not a lock record: younger than ``WRITE_GRACE`` it may be one being
       written (held); older, it is damaged.
    2. Its run has ended: stale.
    3. An agent is known (from the run's state, else from the lock): held
       while that exact process lives, stale once it is gone, unless the run
       outlives its agent (a cluster job, whose agent a server replaces):
       held until it ends.
    4. No agent known yet. The run folder does not exist: stale once its
       creator is gone (or, for a lock that names no creator, after
       ``START_GRACE``); held while the creator lives, up to ``CREATE_GRACE``.
    5. The folder exists but no agent is known: held while the creator lives
       (up to ``CREATE_GRACE``) and for ``START_GRACE`` after it is gone (it
       may have spawned an agent that has not written its state yet).
    """
    if lock is None:
        if lock_age < WRITE_GRACE:
            return Judgement(Verdict.HELD, None, "active.lock is being written")
        return Judgement(Verdict.DAMAGED, None, "active.lock does not name a run")
    run_id = lock.run_id
    if facts.final:
        return Judgement(Verdict.STALE, run_id, f"run {run_id} has ended")
    agent = (facts.agent_pid, facts.agent_create_time)
    if agent[0] is None:
        agent = (lock.agent_pid, lock.agent_create_time)
    if agent[0] is not None:
        if alive(*agent):
            return Judgement(Verdict.HELD, run_id, f"the agent of run {run_id} (pid {agent[0]}) is alive")
        if facts.outlives_agent:
            why = f"run {run_id} goes on without its agent (on a cluster)"
            return Judgement(Verdict.HELD, run_id, why)
        return Judgement(Verdict.STALE, run_id, f"the agent of run {run_id} (pid {agent[0]}) is gone")
    creator_known = lock.pid is not None and lock.create_time is not None
    creator_alive = creator_known and alive(lock.pid, lock.create_time)
    if creator_alive:
        if lock_age < CREATE_GRACE:
            return Judgement(Verdict.HELD, run_id, f"run {run_id} is being created by pid {lock.pid}")
        return Judgement(Verdict.STALE, run_id, f"run {run_id} got no agent in {CREATE_GRACE:.0f}s")
    if not facts.run_exists and creator_known:
        return Judgement(Verdict.STALE, run_id, f"run {run_id} was never created and its creator is gone")
    if lock_age < START_GRACE:
        return Judgement(Verdict.HELD, run_id, f"run {run_id} may still be starting")
    return Judgement(Verdict.STALE, run_id, f"run {run_id} has no agent after {START_GRACE:.0f}s")


class RunHeld(Exception):
    """The workspace has an active run (or a claim in progress)."""

    def __init__(self, run_id: str | None, reason: str) -> None:
        super().__init__(reason)
        self.run_id = run_id
        self.reason = reason


def new_run_id(job_id: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    return f"{job_id}-{stamp}-{secrets.token_hex(3)}"


class RunLock:
    """Creates runs and holds, judges, breaks and releases ``active.lock``. See the module docstring."""

    def __init__(
        self,
        folder: StateFolder,
        report: Callable[[str], None] | None = None,
        alive: Alive = platform.is_same_process,
    ) -> None:
        self.folder = folder
        self.report = report
        """Told once about each damaged lock moved aside (the server warns the user)."""
        self.alive = alive

    @property
    def path(self) -> Path:
        return self.folder.lock_path

    # -- creating a run ---------------------------------------------------------------------

    def claim(self, job_id: str, build_spec: Callable[[str], RunSpec]) -> RunDir:
        """Create a run of ``job_id`` and make it the active run; ``RunHeld`` when another is.

        The run is built under a staging name with its spec, the lock is
        taken, and only then is the folder renamed into ``runs/``. Any
        failure (a full disk, say) leaves neither folder nor lock behind.
        """
        self.folder.ensure()
        run_id = new_run_id(job_id)
        staging = self.folder.runs_dir / f"{STAGING_PREFIX}{run_id}"
        staging.mkdir()
        try:
            RunDir(staging).write_spec(build_spec(run_id))
            with self._turn():
                self._take(run_id)
                try:
                    os.rename(staging, self.folder.runs_dir / run_id)
                except BaseException:
                    self._remove_if_holder(run_id)
                    raise
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return RunDir(self.folder.runs_dir / run_id)

    def record_agent(self, run_id: str, pid: int, create_time: float | None) -> None:
        """The run's agent is spawned: from now on the lock lives as long as it does."""
        with self._turn(required=False):
            current = self._read()
            if current is None or current[0] is None or current[0].run_id != run_id:
                return
            record = attrs.evolve(current[0], agent_pid=pid, agent_create_time=create_time)
            tmp = self._write_temp(record)
            try:
                platform.replace_file(tmp, self.path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def replace_agent(self, run_id: str, start: Callable[[], P | None]) -> P | None:
        """Start the run's agent again with ``start`` and record it, if ``run_id`` still holds the lock.

        The run's first agent died before it took the run, and the lock names
        that dead agent: any claimant may judge it stale and take the
        workspace meanwhile. So the check that the lock is still this run's,
        the start and the record happen in one turn; when another run holds
        the lock now (or the turn cannot be had), nothing is started: None.
        """
        try:
            with self._turn():
                current = self._read()
                if current is None or current[0] is None or current[0].run_id != run_id:
                    return None
                process = start()
                if process is not None:
                    record = attrs.evolve(
                        current[0],
                        agent_pid=process.pid,
                        agent_create_time=platform.process_identity(process.pid),
                    )
                    tmp = self._write_temp(record)
                    try:
                        platform.replace_file(tmp, self.path)
                    except OSError as error:  # the agent's state names it soon: the lock follows that
                        with contextlib.suppress(OSError):
                            os.unlink(tmp)
                        log.warning("could not record the new agent in the lock: %s", error)
                return process
        except RunHeld:
            return None

    def release(self, run_id: str) -> None:
        """Release the lock if ``run_id`` holds it (never another run's lock)."""
        with self._turn(required=False):
            self._remove_if_holder(run_id)

    # -- reading ----------------------------------------------------------------------------

    def holder(self) -> str | None:
        """The run id the lock names, if it names one."""
        current = self._read()
        return current[0].run_id if current is not None and current[0] is not None else None

    def judge_now(self) -> Judgement | None:
        """The lock's judgement as the files stand; None when there is no lock."""
        current = self._read()
        if current is None:
            return None
        record, age = current
        facts = self._facts(record.run_id) if record is not None else HolderFacts(run_exists=False)
        return judge(record, age, facts, self.alive)

    def sweep_staging(self, older_than: float = CREATE_GRACE) -> None:
        """Remove staging folders a claimant left behind (it died while building its run)."""
        with contextlib.suppress(OSError):
            for entry in self.folder.runs_dir.iterdir():
                if entry.name.startswith(STAGING_PREFIX) and _age(entry) > older_than:
                    shutil.rmtree(entry, ignore_errors=True)

    # -- inside a turn ------------------------------------------------------------------------

    def _take(self, run_id: str) -> None:
        me = os.getpid()
        record = LockRecord(run_id=run_id, pid=me, create_time=platform.process_identity(me))
        for _attempt in range(3):
            if self._create(record):
                return
            judgement = self.judge_now()
            if judgement is None:
                continue  # released meanwhile
            if judgement.verdict is Verdict.HELD:
                raise RunHeld(judgement.run_id, judgement.reason)
            self._break(judgement)
        raise RunHeld(None, "the workspace's lock keeps changing hands")

    def _break(self, judgement: Judgement) -> None:
        if judgement.verdict is Verdict.STALE:
            log.warning("breaking the workspace lock: %s", judgement.reason)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            return
        aside = self.path.with_name(f"{self.path.name}.damaged-{secrets.token_hex(4)}")
        try:
            platform.replace_file(self.path, aside)
        except FileNotFoundError:
            return
        message = f"{self.path} {_describe(aside)} ({judgement.reason}); moved it aside to {aside.name}"
        log.warning("%s", message)
        if self.report is not None:
            self.report(message)

    def _create(self, record: LockRecord) -> bool:
        """Create the lock with its content in one step; False when a lock exists."""
        tmp = self._write_temp(record)
        try:
            os.link(tmp, self.path)
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links: exclusive create, then write
            return self._create_exclusive(record)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return True

    def _create_exclusive(self, record: LockRecord) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as handle:
            handle.write(record.to_json())
        return True

    def _write_temp(self, record: LockRecord) -> Path:
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}.tmp")
        with open(tmp, "wb") as handle:
            handle.write(record.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        return tmp

    def _remove_if_holder(self, run_id: str) -> None:
        current = self._read()
        if current is not None and current[0] is not None and current[0].run_id == run_id:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

    def _read(self) -> tuple[LockRecord | None, float] | None:
        """(the lock's record or None when unreadable, its age); None when there is no lock."""
        try:
            age = _age(self.path)
            if self.path.is_dir():
                return None, float("inf")  # a directory is never a lock being written
            raw = platform.read_bytes_shared(self.path)[:4096]
        except FileNotFoundError:
            return None
        except OSError as error:
            if platform.is_sharing_violation(error):
                return None, 0.0  # held open by another process (Windows): judged held, never broken
            return None, float("inf")
        return parse_lock(raw), age

    def _facts(self, run_id: str) -> HolderFacts:
        run_dir = RunDir(self.folder.runs_dir / run_id)
        exists = run_dir.path.is_dir() or (self.folder.runs_dir / f"{STAGING_PREFIX}{run_id}").is_dir()
        if not exists:
            return HolderFacts(run_exists=False)
        try:
            state = run_dir.read_state()
        except (FileNotFoundError, CorruptState, OSError):
            return HolderFacts(run_exists=True)
        return HolderFacts(
            run_exists=True,
            final=state.status.is_final,
            agent_pid=state.agent_pid,
            agent_create_time=state.agent_create_time,
            outlives_agent=state.cluster is not None,
        )

    @contextlib.contextmanager
    def _turn(self, *, required: bool = True) -> Iterator[None]:
        """One claimant at a time, across every process of the workspace (an OS file lock).

        ``required=False``: after ``MUTEX_WAIT`` go ahead anyway (releasing
        one's own lock must not depend on another process's turn ending).
        """
        try:
            self.folder.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.folder.root / ".runlock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            if required:
                raise
            yield  # not even an empty file can be made (no inode left): release without a turn
            return
        locked = False
        try:
            deadline = time.monotonic() + MUTEX_WAIT
            delay = 0.001
            while not (locked := platform.try_lock_file(fd)):
                if time.monotonic() > deadline:
                    if required:
                        raise RunHeld(None, "another server has been claiming the workspace for too long")
                    break
                time.sleep(delay)
                delay = min(delay * 2, 0.02)
            yield
        finally:
            if locked:
                platform.unlock_file(fd)
            os.close(fd)


def _age(path: Path) -> float:
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return 0.0


def _describe(path: Path) -> str:
    return "was a directory" if path.is_dir() else "did not name a run"


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _float_or_none(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    return None
