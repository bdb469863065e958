"""Keep-awake is held exactly while a train run runs (contract 8.3; issue 37's "Done when").

A real job agent (``python -m arena_ls.agent.launch``) runs a real trainer,
and asks a real ``dbus-daemon`` of the test's own for its logind inhibitor
(``ARENA_LOGIND_BUS_ADDRESS``), where a fake ``org.freedesktop.login1`` gives
out a file descriptor and watches it close: taken at the start, released at a
normal end, at a crash, and at ``kill -9`` of the agent (the kernel closes the
descriptor: no trainer inherited it). Off, it is never asked for; refused, the
run goes on with ``keepAwake`` null and the reason in its log.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena_ls.platform_awake import INHIBIT_MODE, INHIBIT_WHAT, LOGIND_BUS_ENV
from arena_ls.run.rundir import PowerSpec
from arena_ls.run.states import RunStatus
from tests.helpers.agent_runs import AgentRun
from tests.helpers.dbus import DBUS_DAEMON, DBusDaemon, FakeLogind
from tests.helpers.waiting import wait_until

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="logind is Linux's"),
    pytest.mark.skipif(
        DBUS_DAEMON is None, reason="dbus-daemon is not installed (scripts/test.sh installs it)"
    ),
]


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[DBusDaemon]:
    daemon = DBusDaemon(tmp_path)
    try:
        yield daemon
    finally:
        daemon.close()


@pytest.fixture
def logind(bus: DBusDaemon) -> Iterator[FakeLogind]:
    service = FakeLogind(bus.address)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[AgentRun]]:
    started: list[AgentRun] = []
    yield started
    for run in started:
        run.close()


def start(
    runs: list[AgentRun], root: Path, bus: DBusDaemon, *args: str, keep_awake: bool = True, **spec: Any
) -> AgentRun:
    power = PowerSpec(require_plugged_in=False, min_free_ram_mb=0, keep_awake=keep_awake)
    run = AgentRun(root, *args, env={LOGIND_BUS_ENV: bus.address}, power=power, **spec)
    runs.append(run)
    return run


def test_the_inhibitor_is_taken_at_the_start_and_released_at_the_end(
    tmp_path: Path, bus: DBusDaemon, logind: FakeLogind, runs: list[AgentRun]
) -> None:
    run = start(runs, tmp_path, bus, "--steps", "100000", "--interval", "0.05")
    [inhibition] = logind.wait_for_inhibitions(1)
    assert (inhibition.what, inhibition.who, inhibition.mode) == (INHIBIT_WHAT, "arena-ls", INHIBIT_MODE)
    assert inhibition.why == f"training Lm (run {run.run_dir.run_id})"
    running = run.wait_status(RunStatus.RUNNING)
    assert not inhibition.released.is_set(), "held while the run runs"
    wait_until(lambda: (run.state() or running).keep_awake is True, "keepAwake recorded")
    run.run_dir.request_stop(kill=False, grace_seconds=30.0, by="the test")
    state = run.ended()
    assert state.status is RunStatus.STOPPED
    assert inhibition.released.wait(30), "released when the run ended"
    assert state.keep_awake is True
    assert any(line.startswith("keeping the machine awake") for line in run.arena_lines())


def test_the_inhibitor_is_held_through_relaunches_and_released_when_the_run_succeeds(
    tmp_path: Path, bus: DBusDaemon, logind: FakeLogind, runs: list[AgentRun]
) -> None:
    run = start(
        runs, tmp_path, bus, "--steps", "12", "--ckpt-every", "2", "--crash-after-progress", "4",
        max_restarts=3,
    )  # fmt: skip
    state = run.ended()
    assert state.status is RunStatus.SUCCEEDED
    assert state.restarts >= 2, "relaunched on its way"
    [inhibition] = logind.wait_for_inhibitions(1)
    assert inhibition.released.wait(30)
    assert len(logind.inhibitions) == 1, "one hold for the whole run, relaunches included"


def test_the_inhibitor_is_released_when_the_run_crashes(
    tmp_path: Path, bus: DBusDaemon, logind: FakeLogind, runs: list[AgentRun]
) -> None:
    run = start(runs, tmp_path, bus, "--steps", "5", "--exit-code", "3")
    [inhibition] = logind.wait_for_inhibitions(1)
    state = run.ended()
    assert state.status is RunStatus.CRASHED
    assert inhibition.released.wait(30)


def test_the_inhibitor_is_released_when_the_agent_is_killed(
    tmp_path: Path, bus: DBusDaemon, logind: FakeLogind, runs: list[AgentRun]
) -> None:
    run = start(runs, tmp_path, bus, "--steps", "100000", "--interval", "0.05")
    [inhibition] = logind.wait_for_inhibitions(1)
    state = run.wait_status(RunStatus.RUNNING)
    trainer = state.pid
    assert not inhibition.released.is_set()
    os.kill(run.agent.pid, signal.SIGKILL)
    run.agent.wait()
    assert inhibition.released.wait(30), "the kernel closed the lock's descriptor with the agent"
    if trainer is not None:  # the trainer dies with its agent (Linux); it never held the lock
        wait_until(lambda: _gone(trainer), "the trainer gone with its agent")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_keep_awake_off_asks_for_nothing(
    tmp_path: Path, bus: DBusDaemon, logind: FakeLogind, runs: list[AgentRun]
) -> None:
    run = start(runs, tmp_path, bus, "--steps", "3", keep_awake=False)
    state = run.ended()
    assert state.status is RunStatus.SUCCEEDED
    assert state.keep_awake is False
    assert logind.inhibitions == []


def test_a_refused_inhibitor_leaves_the_run_going_with_keep_awake_null_and_the_reason(
    tmp_path: Path, bus: DBusDaemon, logind: FakeLogind, runs: list[AgentRun]
) -> None:
    logind.refuse = "Access denied by polkit"
    run = start(runs, tmp_path, bus, "--steps", "3")
    state = run.ended()
    assert state.status is RunStatus.SUCCEEDED
    assert state.keep_awake is None
    [reason] = [line for line in run.arena_lines() if line.startswith("the machine cannot be kept awake")]
    assert "Access denied by polkit" in reason


def test_no_bus_at_all_leaves_the_run_going_with_keep_awake_null(
    tmp_path: Path, runs: list[AgentRun]
) -> None:
    run = AgentRun(tmp_path, "--steps", "3", env={LOGIND_BUS_ENV: f"unix:path={tmp_path / 'no-such-bus'}"})
    runs.append(run)
    state = run.ended()
    assert (state.status, state.keep_awake) == (RunStatus.SUCCEEDED, None)
    assert any("cannot reach unix:path=" in line for line in run.arena_lines())
