"""Issue 39 item 7, in parts: a stop request and a final state that need no new data block.

``stop_marks``: what a stop asks, said by the names of empty files when
``stop.json`` cannot be written; ``reserve.write_in_place``: the final state in
the blocks ``state.json`` holds already. The end-to-end attack (a real full
tmpfs) is ``tests/attacks/test_full_disk_stop.py``.
"""

from __future__ import annotations

import errno
import json
import sys
import threading
from pathlib import Path

import pytest

from arena_ls.agent import trainer_start
from arena_ls.agent.reserve import write_in_place
from arena_ls.agent.statewriter import StateWriter
from arena_ls.run import rundir, stop_marks
from arena_ls.run.rundir import RunDir, RunState
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    def full(path: Path, payload: object) -> None:
        raise ENOSPC

    monkeypatch.setattr(rundir, "write_json_atomic", full)


@pytest.mark.usefixtures("full_disk")
def test_a_kill_on_a_full_disk_is_asked_by_names(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.request_stop(kill=True, grace_seconds=2.5, by="test")
    assert run_dir.stop_request_path.stat().st_size == 0
    assert (tmp_path / stop_marks.KILL_MARK).stat().st_size == 0
    expected = {"kill": True, "graceSeconds": 2.5}
    assert run_dir.read_stop_request() == expected
    assert trainer_start.read_stop_request(tmp_path) == expected, "the launcher reads the same request"


@pytest.mark.usefixtures("full_disk")
def test_a_kill_after_a_first_stop_escalates_on_a_full_disk(tmp_path: Path) -> None:
    (tmp_path / "stop.json").write_text(json.dumps({"kill": False, "graceSeconds": 30, "by": "a"}))
    run_dir = RunDir(tmp_path)
    run_dir.request_stop(kill=True, grace_seconds=None, by="test")  # stop.json cannot be rewritten
    request = run_dir.read_stop_request()
    assert request is not None and request["kill"] is True and request["graceSeconds"] == 30


def test_marks_that_say_nothing_sensible_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "stop.json").write_text("")
    for name in ("stop.grace-nan", "stop.grace--3", "stop.grace-x", "stop.grace-inf"):
        (tmp_path / name).write_text("")
    assert RunDir(tmp_path).read_stop_request() == {}
    assert stop_marks.with_marks(tmp_path / "gone", {}) == {}, "a folder that is gone says nothing"


@pytest.mark.skipif(sys.platform == "win32", reason="st_blocks is POSIX")
def test_the_final_state_is_written_in_place_within_the_blocks_it_holds(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b'{"status": "running", "padding": "' + b"x" * 1500 + b'"}')
    write_in_place(target, b'{"status": "stopped"}')
    assert json.loads(target.read_bytes()) == {"status": "stopped"}
    with pytest.raises(OSError, match="final state needs"):
        write_in_place(target, b"y" * (1 << 20))
    assert json.loads(target.read_bytes()) == {"status": "stopped"}, "left as it was"


@pytest.mark.skipif(sys.platform == "win32", reason="st_blocks is POSIX")
def test_a_final_state_with_no_reserve_goes_in_place_on_a_full_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arena_ls.agent import statewriter

    run_dir = RunDir(tmp_path)
    state = RunState(run_id="r", job_id="j", status=RunStatus.RUNNING)
    run_dir.write_state(state)

    def full(path: Path, payload: object) -> None:
        raise ENOSPC

    monkeypatch.setattr(statewriter, "write_json_atomic", full)
    lock = threading.RLock()
    writer = StateWriter(run_dir, StateFolder(tmp_path / "folder"), state, lock, lambda event: None)
    with lock:
        state.status = RunStatus.STOPPED
    assert writer.close_final(patience_without_folder=5.0)
    assert writer.in_place and not writer.reserve_used
    assert run_dir.read_state().status is RunStatus.STOPPED


def test_where_nothing_fits_the_final_state_waits_for_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No reserve and no room in place: the write is retried until space returns, never dropped."""
    from arena_ls.agent import statewriter

    run_dir = RunDir(tmp_path)
    state = RunState(run_id="r", job_id="j", status=RunStatus.RUNNING)
    run_dir.write_state(state)
    real = statewriter.write_json_atomic
    failures = []

    def full_for_a_while(path: Path, payload: object) -> None:
        if len(failures) < 3:
            failures.append(path)
            raise ENOSPC
        real(path, payload)

    def nothing_fits(target: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "no room in place either")

    monkeypatch.setattr(statewriter, "write_json_atomic", full_for_a_while)
    monkeypatch.setattr(statewriter, "write_in_place", nothing_fits)
    lock = threading.RLock()
    writer = StateWriter(run_dir, StateFolder(tmp_path / "folder"), state, lock, lambda event: None)
    with lock:
        state.status = RunStatus.STOPPED
    assert writer.close_final(patience_without_folder=5.0)
    assert len(failures) == 3 and not writer.in_place
    assert run_dir.read_state().status is RunStatus.STOPPED
