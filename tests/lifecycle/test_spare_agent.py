"""The spare job agent (``lifecycle/spare.py``): loaded while idle, handed the next run, never left behind.

The rules, unit-tested with a fake process, then through a real ``arena-ls``
over stdio with real processes and signals: the spare is the run's agent,
one appears again once the run is over, none waits while a run is active,
a dead spare falls back to a cold start, and no spare outlives its server,
whether the server shuts down or is killed.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from arena_ls.lifecycle.launch import SPARE_FLAG, read_order
from arena_ls.lifecycle.rundir import RunDir
from arena_ls.lifecycle.spare import DISABLE_VARIABLE, MOST_DEATHS, SpareAgent, spare_argv
from tests.helpers.lsp import (
    ArenaClient,
    job,
    kill_server,
    make_workspace,
    spares_of,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Windows starts every agent cold")


# --------------------------------------------------------------------------- the rules, with a fake process


class FakeSpare:
    """A ``subprocess.Popen`` as ``SpareAgent`` uses it: a pid, ``poll`` and an order pipe."""

    def __init__(self, pid: int, *, alive: bool = True, broken_pipe: bool = False) -> None:
        self.pid = pid
        self.alive = alive
        self.stdin: Any = _BrokenPipe() if broken_pipe else io.BytesIO()
        self.order = b""
        self.closed = False
        if not broken_pipe:
            self.stdin.close = self._close  # keep what was written readable

    def _close(self) -> None:
        self.order = self.stdin.getvalue()
        self.closed = True

    def poll(self) -> int | None:
        return self.returncode

    @property
    def returncode(self) -> int | None:
        return None if self.alive else 1


class _BrokenPipe(io.BytesIO):
    def write(self, data: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")


class Spawner:
    def __init__(self, *spares: FakeSpare | OSError) -> None:
        self.queue = list(spares)
        self.calls: list[tuple[list[str], Path]] = []

    def __call__(self, argv: list[str], cwd: Path) -> Any:
        self.calls.append((argv, cwd))
        made = self.queue.pop(0)
        if isinstance(made, OSError):
            raise made
        return made


def test_one_spare_per_workspace_started_once(tmp_path: Path) -> None:
    spare = FakeSpare(100)
    spawn = Spawner(spare)
    agents = SpareAgent(spawn, enabled=True)
    agents.ensure(tmp_path)
    agents.ensure(tmp_path)
    assert [cwd for _, cwd in spawn.calls] == [tmp_path]
    assert spawn.calls[0][0] == spare_argv() and spare_argv()[-1] == SPARE_FLAG
    assert agents.process is spare


def test_the_spare_is_handed_the_run_once(tmp_path: Path) -> None:
    spare = FakeSpare(100)
    agents = SpareAgent(Spawner(spare), enabled=True)
    agents.ensure(tmp_path)
    run = RunDir(tmp_path / "runs" / "r1")
    assert agents.take(run, tmp_path) is spare
    assert spare.closed
    assert json.loads(spare.order) == {"runDir": str(run.path), "agentLog": str(run.agent_log)}
    assert agents.take(run, tmp_path) is None, "a spare is handed one run only"


def test_a_dead_spare_or_a_broken_pipe_means_a_cold_start(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "runs" / "r1")
    dead = SpareAgent(Spawner(FakeSpare(100, alive=False)), enabled=True)
    dead.ensure(tmp_path)  # dies before it is asked for
    assert dead.take(run, tmp_path) is None
    broken = SpareAgent(Spawner(FakeSpare(101, broken_pipe=True)), enabled=True)
    broken.ensure(tmp_path)
    assert broken.take(run, tmp_path) is None


def test_a_spare_of_another_workspace_is_not_used_and_a_dead_one_is_replaced(tmp_path: Path) -> None:
    first, second = FakeSpare(100), FakeSpare(101)
    spawn = Spawner(first, second)
    agents = SpareAgent(spawn, enabled=True)
    agents.ensure(tmp_path / "a")
    assert agents.take(RunDir(tmp_path / "b" / "r1"), tmp_path / "b") is None
    assert first.closed and first.order == b"", "dismissed without an order"
    agents.ensure(tmp_path / "b")
    second.alive = False
    third = FakeSpare(102)
    spawn.queue.append(third)
    agents.ensure(tmp_path / "b")
    assert agents.process is third


def test_a_spare_that_keeps_dying_is_given_up(tmp_path: Path) -> None:
    """A broken environment must not start an interpreter every idle round: three deaths, then cold."""
    dying = [FakeSpare(100 + n) for n in range(MOST_DEATHS + 2)]
    spawn = Spawner(*dying)
    agents = SpareAgent(spawn, enabled=True)
    for spare in dying:
        agents.ensure(tmp_path)
        spare.alive = False  # it exits before it is asked for
    assert len(spawn.calls) == MOST_DEATHS and agents.deaths == MOST_DEATHS
    assert not agents.enabled and agents.process is None
    assert agents.take(RunDir(tmp_path / "r"), tmp_path) is None


def test_no_spare_when_disabled_or_when_it_cannot_start(tmp_path: Path, monkeypatch: Any) -> None:
    spawn = Spawner(FakeSpare(100))
    monkeypatch.setenv(DISABLE_VARIABLE, "1")
    off = SpareAgent(spawn)
    off.ensure(tmp_path)
    assert spawn.calls == [] and off.take(RunDir(tmp_path / "r"), tmp_path) is None
    failing = SpareAgent(Spawner(OSError(24, "Too many open files")), enabled=True)
    failing.ensure(tmp_path)
    assert failing.process is None


def test_release_lets_the_spare_go(tmp_path: Path) -> None:
    spare = FakeSpare(100)
    agents = SpareAgent(Spawner(spare), enabled=True)
    agents.ensure(tmp_path)
    agents.release()
    assert spare.closed and spare.order == b"" and agents.process is None


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"runDir": "/r", "agentLog": "/r/agent.log"}\n', ("/r", "/r/agent.log")),
        (b"", None),  # end-of-file: the server is gone
        (b"not json\n", None),
        (b'{"runDir": 3, "agentLog": "/x"}\n', None),
        (b'["/r"]\n', None),
        (b'{"runDir": "/r"}\n', None),
    ],
)
def test_the_order_a_spare_reads(line: bytes, expected: tuple[str, str] | None) -> None:
    assert read_order(line) == expected


# --------------------------------------------------------------------------- a real server


def spare_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def one_spare(client: ArenaClient, but_not: int | None = None) -> psutil.Process:
    spares = await wait_for(lambda: [s for s in spares_of(client) if s.pid != but_not], what="a spare agent")
    assert len(spares) == 1, spares
    return spares[0]


async def test_the_spare_becomes_the_runs_agent_and_another_waits_after_the_run(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3", "--interval", "0.01")])
    client = await start_server(root)
    try:
        spare = await one_spare(client)
        info = await client.call("arena/start", {"id": "quick"})
        assert info["agentPid"] == spare.pid
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded", final
        next_spare = await one_spare(client, but_not=spare.pid)
        assert next_spare.pid != spare.pid
    finally:
        await stop_server(client)


async def test_no_spare_waits_while_a_run_is_active(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("slow", "--steps", "100000", "--interval", "0.05")])
    client = await start_server(root)
    try:
        spare = await one_spare(client)
        info = await client.call("arena/start", {"id": "slow"})
        await wait_status(client, info["runId"], "running")
        await client.call("arena/status", {})  # a full round of the follower has seen the run
        await client.call("arena/status", {})
        waiting = [s.pid for s in spares_of(client) if s.pid != info["agentPid"]]
        assert waiting == [], "a spare waited beside a running trainer"
        assert info["agentPid"] == spare.pid
        stderr = Path(f"/proc/{spare.pid}/fd/2")
        log = root / ".aide" / "training" / "runs" / info["runId"] / "agent.log"
        if stderr.exists():  # Linux: the spare's streams are now a cold agent's
            assert os.readlink(stderr) == str(log)
            assert os.readlink(stderr.parent / "0") == os.devnull
        await client.call("arena/stop", {"kill": True, "confirm": True})
        await wait_status(client, info["runId"], "stopped", "crashed", "lost")
    finally:
        await stop_server(client)


async def test_a_killed_spare_means_a_cold_start_that_still_runs(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3", "--interval", "0.01")])
    client = await start_server(root)
    try:
        spare = await one_spare(client)
        spare.send_signal(signal.SIGKILL)
        info = await client.call("arena/start", {"id": "quick"})
        assert info["agentPid"] != spare.pid
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded", final
    finally:
        await stop_server(client)


@pytest.mark.parametrize("ending", ["shutdown", "kill -9"])
async def test_no_spare_outlives_its_server(tmp_path: Path, ending: str) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3")])
    client = await start_server(root)
    spare = await one_spare(client)
    if ending == "shutdown":
        await stop_server(client)
    else:
        await kill_server(client)
    await wait_for(lambda: spare_gone(spare.pid), what=f"the spare {spare.pid} to exit")
    assert not list(root.glob(".aide/training/runs/*")), "a spare started a run"


async def test_the_switch_starts_every_agent_cold(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3", "--interval", "0.01")])
    client = await start_server(root, env={DISABLE_VARIABLE: "1"})
    try:
        info = await client.call("arena/start", {"id": "quick"})
        await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        await client.call("arena/status", {})
        assert spares_of(client) == []
    finally:
        await stop_server(client)


def test_windows_never_starts_a_spare(tmp_path: Path, monkeypatch: Any) -> None:
    """The Windows branch (faked here): no spare process, so every start there is cold."""
    from arena_ls import platform

    started: list[Any] = []
    monkeypatch.setattr(platform.sys, "platform", "win32")
    monkeypatch.setattr(platform.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert platform.spawn_spare_agent(spare_argv(), cwd=tmp_path) is None
    agents = SpareAgent(enabled=True)
    agents.ensure(tmp_path)
    assert agents.process is None and started == []
