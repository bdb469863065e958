"""State files under Windows sharing violations (faked in-process): writes, reads, adoption, changes."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.agent.statewriter import StateWriter
from arena_ls.errors import ArenaError
from arena_ls.lifecycle import starter as starter_module
from arena_ls.lifecycle.backends.base import Backends
from arena_ls.lifecycle.backends.local import LocalBackend
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.rundir import (
    CorruptState,
    RunDir,
    RunSpec,
    RunState,
    StateBusy,
    read_json,
    write_json_atomic,
)
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from arena_ls.settings import Settings


def sharing_violation(path: object = "state.json") -> PermissionError:
    error = PermissionError(errno.EACCES, "being used by another process", str(path))
    error.winerror = 32  # type: ignore[attr-defined,unused-ignore]
    return error


class Flaky:
    """Raises a sharing violation ``times`` times, then calls through."""

    def __init__(self, real: Any, times: int, error: OSError | None = None, only: str = "") -> None:
        self.real, self.left, self.calls = real, times, 0
        self.error = error
        self.only = only

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.left != 0 and str(args[0] if args else "").endswith(self.only):
            self.left -= 1
            raise self.error or sharing_violation(args[0] if args else "")
        return self.real(*args, **kwargs)


def test_the_replace_retries_sharing_violations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flaky = Flaky(os.replace, 5)
    monkeypatch.setattr(os, "replace", flaky)
    write_json_atomic(tmp_path / "state.json", {"a": 1})
    assert read_json(tmp_path / "state.json") == {"a": 1} and flaky.calls == 6
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"], "no temporary file is left"


def test_a_lasting_sharing_violation_is_raised_after_the_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(platform.files, "REPLACE_RETRY_SECONDS", 0.05)
    monkeypatch.setattr(os, "replace", Flaky(os.replace, -1))
    with pytest.raises(PermissionError):
        write_json_atomic(tmp_path / "state.json", {"a": 1})
    assert list(tmp_path.iterdir()) == []


def test_a_real_permission_error_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    flaky = Flaky(os.replace, 1, PermissionError(errno.EACCES, "read-only"))
    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(PermissionError):
        write_json_atomic(tmp_path / "state.json", {"a": 1})
    assert flaky.calls == 1


def test_a_read_retries_a_file_held_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_json_atomic(tmp_path / "state.json", {"a": 1})
    real_read = platform.files._read_once
    monkeypatch.setattr(platform.files, "_read_once", Flaky(real_read, 3))
    assert read_json(tmp_path / "state.json") == {"a": 1}


def test_a_file_held_open_for_good_is_busy_not_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_json_atomic(tmp_path / "state.json", {"a": 1})
    monkeypatch.setattr(platform.files, "REPLACE_RETRY_SECONDS", 0.05)
    monkeypatch.setattr(platform.files, "_read_once", Flaky(platform.files._read_once, -1))
    with pytest.raises(StateBusy) as caught:
        read_json(tmp_path / "state.json")
    assert not isinstance(caught.value, CorruptState)


def held_open_run(tmp_path: Path) -> tuple[StateFolder, RunDir]:
    folder = StateFolder(tmp_path / ".aide" / "training")

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="job", job_name="Job", kind="task", argv=["x"], cwd=".")

    run = RunLock(folder).claim("job", build)
    state = RunState(run_id=run.run_id, job_id="job", status=RunStatus.RUNNING)
    state.agent_pid, state.agent_create_time = os.getpid(), platform.process_identity(os.getpid())
    run.write_state(state)
    assert RunLock(folder).holder() == run.run_id
    return folder, run


class Quiet:
    def run_changed(self, view: RunView) -> None: ...
    def run_lines(self, view: RunView, lines: list[Any]) -> None: ...
    def lifecycle(self, view: RunView, event: AgentRecord) -> None: ...
    def warning(self, text: str) -> None: ...


async def test_a_run_whose_files_are_held_open_is_neither_skipped_nor_unlocked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, run = held_open_run(tmp_path)
    supervisor = Supervisor(tmp_path, lambda: Settings(), Quiet(), backends=Backends(LocalBackend()))
    monkeypatch.setattr(platform.files, "REPLACE_RETRY_SECONDS", 0.02)
    monkeypatch.setattr(platform.files, "_read_once", Flaky(platform.files._read_once, -1, only="state.json"))
    # The holder's view cannot appear while its state is held open: no need to wait 5 s for it.
    monkeypatch.setattr(starter_module, "HOLDER_WAIT", 0.05)
    supervisor.scan()
    assert run.run_id not in supervisor.views
    with pytest.raises(ArenaError) as refused:
        await supervisor.starter._refuse_if_active()
    assert "one job at a time" in str(refused.value)
    monkeypatch.undo()
    assert RunLock(folder).holder() == run.run_id, "the live run's lock must not be broken"
    monkeypatch.setattr(platform.files, "REPLACE_RETRY_SECONDS", 0.02)
    monkeypatch.setattr(
        platform.files, "_read_once", Flaky(platform.files._read_once, -1, only="active.lock")
    )
    with pytest.raises(ArenaError, match="one job at a time"):
        await supervisor.starter._refuse_if_active()
    monkeypatch.undo()
    assert RunLock(folder).holder() == run.run_id
    supervisor.scan()  # the files are free again: adopted
    assert supervisor.views[run.run_id].status is RunStatus.RUNNING


def test_a_replacement_is_seen_when_the_mtime_does_not_move(tmp_path: Path) -> None:
    """As on FAT32/exFAT (2 s mtimes): the new state has the old state's mtime."""
    _, run = held_open_run(tmp_path)
    view = RunView(run, run.read_spec())
    view.refresh_state()
    assert view.state is not None and view.state.status is RunStatus.RUNNING
    before = run.state_path.stat()
    state = run.read_state()
    state.status = RunStatus.SUCCEEDED
    run.write_state(state)
    os.utime(run.state_path, ns=(before.st_atime_ns, before.st_mtime_ns))
    view.refresh_state()
    assert view.state is not None and view.state.status is RunStatus.SUCCEEDED


def test_an_older_generation_never_replaces_a_newer_state(tmp_path: Path) -> None:
    _, run = held_open_run(tmp_path)
    old = run.read_state()
    newer = run.read_state()
    newer.status = RunStatus.SUCCEEDED
    run.write_state(newer)
    view = RunView(run, run.read_spec())
    view.refresh_state()
    write_json_atomic(run.state_path, {**_wire(old), "generation": old.generation})
    view.refresh_state()
    assert view.state is not None and view.state.status is RunStatus.SUCCEEDED


def _wire(state: RunState) -> dict[str, Any]:
    from arena_ls.run.rundir import unstructure

    payload: dict[str, Any] = unstructure(state)
    return payload


def test_the_state_writer_survives_failures_and_writes_the_latest_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, run = held_open_run(tmp_path)
    state = run.read_state()
    reports: list[AgentRecord] = []
    flaky = Flaky(os.replace, 3, OSError(errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(os, "replace", flaky)
    lock = threading.RLock()
    writer = StateWriter(run, folder, state, lock, reports.append)
    with lock:
        state.step = 41
    writer.request()
    with lock:
        state.step = 42
    assert writer.close(timeout=30)
    assert run.read_state().step == 42
    assert writer.failures == 3
    assert reports[0].render().startswith("warning: could not record the run's state")
    assert reports[-1].render() == "the run's state is recorded again"


def test_a_flush_that_cannot_write_times_out_without_raising(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, run = held_open_run(tmp_path)
    state = run.read_state()
    monkeypatch.setattr(platform.files, "REPLACE_RETRY_SECONDS", 0.01)
    monkeypatch.setattr(os, "replace", Flaky(os.replace, -1))
    writer = StateWriter(run, folder, state, threading.RLock(), lambda text: None)
    assert writer.flush(timeout=0.3) is False
    monkeypatch.undo()
    assert writer.close(timeout=30), "once the file is free, the pending state is written"
