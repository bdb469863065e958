"""The cluster agent's outcome survives a full disk (contract 7.1, issue 23 failure 4).

Like a local agent, the agent reserves the space of its final state when
it starts (``state.reserve``) and writes the outcome into it when the usual
write (a temporary file: new blocks) fails; with no reserve it retries for
as long as it lives. On main it gave up after 30 s, and ``state.json`` stayed
``running``. A fake ``JobsClient`` plays Ray (no head, no network); the full
disk is injected (ENOSPC on every usual write of the final state).
"""

from __future__ import annotations

import errno
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from arena_ls.agent import statewriter
from arena_ls.agent.reserve import RESERVE_NAME
from arena_ls.cluster import agent as agent_module
from arena_ls.run.rundir import RunDir
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import RunStatus
from tests.cluster.test_cluster_agent_misbehaving import (
    RUNNING,
    SUCCEEDED,
    FakeJobs,
    cluster_agent,
    follow_to_the_end,
    make_run,
    quick,
)
from tests.helpers.waiting import wait_until

__all__ = ["quick"]  # the fixture, used here too


class FullDisk:
    """``write_json_atomic`` failing with ENOSPC for every final state (``failing`` while set)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real = statewriter.write_json_atomic
        self.failing = threading.Event()
        self.failing.set()
        self.refused = 0
        monkeypatch.setattr(statewriter, "write_json_atomic", self.write)
        monkeypatch.setattr(statewriter, "RETRY_MOST_SECONDS", 0.01)

    def write(self, path: Path, payload: Any) -> None:
        final = isinstance(payload, dict) and payload.get("status") in {"succeeded", "crashed", "stopped"}
        if final and self.failing.is_set() and path.name == "state.json":
            self.refused += 1
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        self.real(path, payload)


@pytest.fixture
def folder(tmp_path: Path) -> StateFolder:
    return StateFolder(tmp_path / ".aide" / "training")


def test_the_final_state_goes_into_the_reserve_on_a_full_disk(
    folder: StateFolder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run: RunDir = make_run(folder, tmp_path)
    disk = FullDisk(monkeypatch)
    agent = cluster_agent(run, FakeJobs([RUNNING, SUCCEEDED]))
    assert (run.path / RESERVE_NAME).stat().st_size == 64 * 1024, "reserved when the agent starts"
    follow_to_the_end(agent.run)
    assert disk.refused >= 1, "the usual write was refused"
    assert run.read_state().status is RunStatus.SUCCEEDED, "the outcome is on disk, the disk still full"
    assert agent.writer.reserve_used
    assert not (run.path / RESERVE_NAME).exists(), "the reserve became state.json"


def test_without_its_reserve_the_final_state_is_retried_until_space_returns(
    folder: StateFolder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(statewriter.StateReserve, "make", _no_room)
    monkeypatch.setattr(statewriter, "write_in_place", _no_room_in_place)  # nor in state.json's blocks
    monkeypatch.setattr(agent_module, "FINAL_WRITE_TIMEOUT", 0.05)  # main gave up after it, outcome unwritten
    run = make_run(folder, tmp_path)
    disk = FullDisk(monkeypatch)
    agent = cluster_agent(run, FakeJobs([RUNNING, SUCCEEDED]))
    done = threading.Thread(target=agent.run, daemon=True)
    done.start()
    wait_until(lambda: disk.refused >= 20, "the final write retried 20 times")
    # The last state written before the end: running, or starting when the agent's writer folded
    # its "running" into the final write; never lost, never half.
    assert json.loads(run.state_path.read_text())["status"] in {"starting", "running"}
    assert done.is_alive(), "the agent waits for space"
    disk.failing.clear()  # space returns
    follow_to_the_end(done.join)
    assert run.read_state().status is RunStatus.SUCCEEDED
    assert "could not reserve space" in (run.path / "output.log").read_text()


def _no_room(self: Any) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def _no_room_in_place(target: Path, data: bytes) -> None:
    """The final state does not fit the blocks ``state.json`` holds (issue 39 item 7's fallback)."""
    raise OSError(errno.ENOSPC, "No space left on device")
