"""The spare job agent (``lifecycle/spare.py``): loaded while idle, handed the next run, never left behind.

The rules, unit-tested with a fake process, then through a real ``arena-ls``
over stdio with real processes and signals: the spare is the run's agent,
one appears again once the run is over, none waits while a run is active,
a dead spare falls back to a cold start, and no spare outlives its server,
whether the server shuts down or is killed.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest
from pygls.exceptions import JsonRpcException

from arena_ls.agent.launch import CLAIM_REFUSED_EXIT, SPARE_FLAG, read_order
from arena_ls.lifecycle.spare import DISABLE_VARIABLE, MOST_DEATHS, SpareAgent, spare_argv
from arena_ls.run.claim import AGENT_CLAIM
from arena_ls.run.rundir import RunDir
from tests.helpers.lsp import (
    WAIT,
    ArenaClient,
    all_logs,
    job,
    kill_server,
    make_workspace,
    run_dir,
    spares_of,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="Windows starts every agent cold")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


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


class HeldSpawner(Spawner):
    """A ``Spawner`` whose spawn waits until ``go`` is set, and says which thread called it."""

    def __init__(self, *spares: FakeSpare | OSError) -> None:
        super().__init__(*spares)
        self.go = threading.Event()
        self.entered = threading.Event()
        self.threads: list[int] = []

    def __call__(self, argv: list[str], cwd: Path) -> Any:
        self.threads.append(threading.get_ident())
        self.entered.set()
        assert self.go.wait(WAIT), "the test never let the spawn go on"
        return super().__call__(argv, cwd)


def _settled(agents: SpareAgent) -> None:
    """Until the spare's thread is idle (``ensure_soon`` submitted nothing, or it ended)."""
    assert agents._thread is not None
    agents._thread.submit(lambda: None).result(WAIT)


def test_ensure_soon_starts_the_spare_on_a_thread_of_its_own(tmp_path: Path) -> None:
    """Issue 38 item 7: the fork and exec of a spare (9-14 ms) never run on the caller's thread
    (the event loop's); asked again meanwhile, nothing more is started."""
    spare = FakeSpare(100)
    spawn = HeldSpawner(spare)
    agents = SpareAgent(spawn, enabled=True)
    agents.ensure_soon(tmp_path)
    assert spawn.entered.wait(WAIT)
    agents.ensure_soon(tmp_path)  # while it starts: not a second one
    spawn.go.set()
    _settled(agents)
    assert spawn.threads != [threading.get_ident()] and len(spawn.threads) == 1
    assert agents.process is spare
    agents.ensure_soon(tmp_path)  # one waits already
    _settled(agents)
    assert len(spawn.calls) == 1


def test_a_take_while_the_spare_starts_waits_for_it_and_one_before_cancels_it(tmp_path: Path) -> None:
    """A start that comes while the spare's thread starts it is handed that spare; a release before
    the thread began means no spare is started at all (none waits beside a run)."""
    spare = FakeSpare(100)
    spawn = HeldSpawner(spare)
    agents = SpareAgent(spawn, enabled=True)
    agents.ensure_soon(tmp_path)
    assert spawn.entered.wait(WAIT)
    threading.Timer(0.05, spawn.go.set).start()  # let it finish while the take below waits
    taken = agents.take(RunDir(tmp_path / "runs" / "r1"), tmp_path)
    assert taken is spare and b'"runDir"' in spare.order
    assert agents.process is None

    idle = HeldSpawner(FakeSpare(101))
    held = SpareAgent(idle, enabled=True)
    blocker = threading.Event()
    held._thread = ThreadPoolExecutor(1)
    held._thread.submit(blocker.wait, WAIT)  # the spare's thread is busy: the spawn waits its turn
    held.ensure_soon(tmp_path)
    held.release()  # the run started, or the server closes: the spare is no longer wanted
    blocker.set()
    idle.go.set()
    _settled(held)
    assert idle.calls == [] and held.process is None


def test_a_spare_waits_until_the_workspace_was_idle_and_a_start_or_close_meanwhile_cancels_it(
    tmp_path: Path,
) -> None:
    """``idle_for``: the spare loads once the workspace stayed idle that long; a run started sooner
    (``take``) goes cold and no spare loads for it, and a closing server (``release``) does not wait
    for the idle time to pass (the thread that waits ends at once: the server's exit joins it)."""
    taken_early = Spawner(FakeSpare(100))
    agents = SpareAgent(taken_early, enabled=True, idle_for=WAIT)
    agents.ensure_soon(tmp_path)
    assert agents.take(RunDir(tmp_path / "runs" / "r1"), tmp_path) is None, "a cold start"
    _settled(agents)  # within WAIT: the waiting thread was woken, not left to wait out WAIT
    assert taken_early.calls == [] and agents.process is None

    closed_early = Spawner(FakeSpare(101))
    closing = SpareAgent(closed_early, enabled=True, idle_for=WAIT)
    closing.ensure_soon(tmp_path)
    closing.release()
    _settled(closing)
    assert closed_early.calls == []

    loaded = Spawner(FakeSpare(102))
    idle = SpareAgent(loaded, enabled=True, idle_for=0.05)
    idle.ensure_soon(tmp_path)
    wait_until(lambda: idle.process is not None, "the spare, once the workspace was idle", timeout=WAIT)
    assert len(loaded.calls) == 1


def test_a_new_ask_after_a_start_waits_its_own_idle_time(tmp_path: Path) -> None:
    """The idle time counts from the ask after the run: a thread still waiting from the ask before
    it does not start the spare on the old time, nor does a second one start another."""
    spawn = Spawner(FakeSpare(100), FakeSpare(101))
    agents = SpareAgent(spawn, enabled=True, idle_for=WAIT)
    agents.ensure_soon(tmp_path)
    assert agents.take(RunDir(tmp_path / "runs" / "r1"), tmp_path) is None
    agents.idle_for = 0.05
    agents.ensure_soon(tmp_path)  # the run ended: idle again
    wait_until(lambda: agents.process is not None, "the spare asked for after the run", timeout=WAIT)
    _settled(agents)
    assert len(spawn.calls) == 1


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
        await client.call("arena/stop", {"kill": True, "confirm": True})
        stopped = await wait_status(client, info["runId"], "stopped", "crashed", "lost")
        assert stopped["status"] == "stopped", stopped
    finally:
        await stop_server(client)


@linux_only
async def test_the_spare_that_became_the_agent_has_a_cold_agents_streams(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("slow", "--steps", "100000", "--interval", "0.05")])
    client = await start_server(root)
    try:
        spare = await one_spare(client)
        assert fd_target(spare.pid, 0).startswith("pipe:["), "waiting, it reads its order pipe"
        info = await client.call("arena/start", {"id": "slow"})
        await wait_status(client, info["runId"], "running")
        assert info["agentPid"] == spare.pid
        log = run_dir(root, info["runId"]) / "agent.log"
        assert fd_target(spare.pid, 2) == str(log)
        assert fd_target(spare.pid, 0) == os.devnull
        await client.call("arena/stop", {"kill": True, "confirm": True})
        stopped = await wait_status(client, info["runId"], "stopped", "crashed", "lost")
        assert stopped["status"] == "stopped", stopped
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
    root = make_workspace(tmp_path / "ws", [job("slow", "--steps", "100000", "--interval", "0.05")])
    client = await start_server(root, env={DISABLE_VARIABLE: "1"})
    try:
        await client.call("arena/status", {})  # an idle round: where spares are kept, one is started
        assert spares_of(client) == []
        info = await client.call("arena/start", {"id": "slow"})
        await wait_status(client, info["runId"], "running")
        agent = psutil.Process(info["agentPid"])
        assert SPARE_FLAG not in agent.cmdline(), agent.cmdline()
        assert agent.cmdline()[-3:] == ["-m", "arena_ls.agent.launch", str(run_dir(root, info["runId"]))]
        await client.call("arena/stop", {"kill": True, "confirm": True})
        stopped = await wait_status(client, info["runId"], "stopped", "crashed", "lost")
        assert stopped["status"] == "stopped", stopped
        await client.call("arena/status", {})  # an idle round again, after the run
        assert spares_of(client) == []
    finally:
        await stop_server(client)


def test_windows_never_starts_a_spare(tmp_path: Path, monkeypatch: Any) -> None:
    """The Windows branch (faked here): no spare process, so every start there is cold."""
    from arena_ls import platform

    started: list[Any] = []
    monkeypatch.setattr(platform.launching.sys, "platform", "win32")
    monkeypatch.setattr(platform.launching.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert platform.spawn_spare_agent(spare_argv(), cwd=tmp_path) is None
    agents = SpareAgent(enabled=True)
    agents.ensure(tmp_path)
    assert agents.process is None and started == []


# --------------------------------------------------------------------------- the order pipe (Linux: /proc)


def fd_target(pid: int, fd: int) -> str:
    return os.readlink(f"/proc/{pid}/fd/{fd}")


def access_mode(pid: int, fd: int) -> int:
    """``O_RDONLY``, ``O_WRONLY`` or ``O_RDWR``: how ``pid`` opened its ``fd`` (``/proc/PID/fdinfo``)."""
    for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
        if line.startswith("flags:"):
            return int(line.split()[1], 8) & os.O_ACCMODE
    raise AssertionError(f"no flags in /proc/{pid}/fdinfo/{fd}")


def holders_of(target: str) -> dict[int, list[int]]:
    """Every process of this user that has ``target`` (``pipe:[inode]``) open: pid -> its fds."""
    found: dict[int, list[int]] = {}
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            entries = list(fd_dir.iterdir())
        except OSError:  # another user's process, or one that just exited
            continue
        for entry in entries:
            try:
                if os.readlink(entry) == target:
                    found.setdefault(int(fd_dir.parent.name), []).append(int(entry.name))
            except OSError:
                continue
    return found


def assert_only_the_server_can_order(client: ArenaClient, spare: psutil.Process) -> str:
    """The spare's stdin is a pipe (not a socket, not a file) whose write end only its server holds."""
    order_pipe = fd_target(spare.pid, 0)
    assert order_pipe.startswith("pipe:["), f"the spare's stdin is {order_pipe}"
    server = client.server_process.pid
    holders = holders_of(order_pipe)
    assert set(holders) == {server, spare.pid}, f"{order_pipe} is open in {holders}"
    assert holders[spare.pid] == [0] and access_mode(spare.pid, 0) == os.O_RDONLY
    assert [access_mode(server, fd) for fd in holders[server]] == [os.O_WRONLY]
    return order_pipe


@linux_only
async def test_the_order_pipe_is_held_by_the_server_alone_and_a_spare_serves_one_workspace(
    tmp_path: Path,
) -> None:
    """Two workspaces, two servers, two spares: each order pipe's write end is in its own server
    only (not in the other server, the other spare, nor this test), and each server hands its run
    to its own spare while the other one goes on waiting, untouched."""
    quick = [job("quick", "--steps", "3", "--interval", "0.01")]
    root_a, root_b = make_workspace(tmp_path / "a", quick), make_workspace(tmp_path / "b", quick)
    client_a = await start_server(root_a)
    client_b = await start_server(root_b)
    try:
        spare_a, spare_b = await one_spare(client_a), await one_spare(client_b)
        pipe_a = assert_only_the_server_can_order(client_a, spare_a)
        assert_only_the_server_can_order(client_b, spare_b)
        assert (spare_a.cwd(), spare_b.cwd()) == (str(root_a), str(root_b))

        info_b = await client_b.call("arena/start", {"id": "quick"})
        assert info_b["agentPid"] == spare_b.pid
        final_b = await wait_status(client_b, info_b["runId"], "succeeded", "crashed", "lost")
        assert final_b["status"] == "succeeded", final_b
        assert run_dir(root_b, info_b["runId"]).is_dir()
        assert not list(root_a.glob(".aide/training/runs/*")), "workspace a got a run"
        assert spare_a.status() != psutil.STATUS_ZOMBIE and fd_target(spare_a.pid, 0) == pipe_a
        assert assert_only_the_server_can_order(client_a, spare_a) == pipe_a, "a's spare is untouched"

        info_a = await client_a.call("arena/start", {"id": "quick"})
        assert info_a["agentPid"] == spare_a.pid
        final_a = await wait_status(client_a, info_a["runId"], "succeeded", "crashed", "lost")
        assert final_a["status"] == "succeeded", final_a
        assert run_dir(root_a, info_a["runId"]).is_dir()
        assert [p.name for p in root_b.glob(".aide/training/runs/*")] == [info_b["runId"]]
    finally:
        await stop_server(client_a)
        await stop_server(client_b)


# ------------------------------------------------------------------------ a spare that dies once handed a run


def lock_of(root: Path) -> dict[str, Any] | None:
    try:
        record: dict[str, Any] = json.loads((root / ".aide" / "training" / "active.lock").read_text())
    except (OSError, ValueError):
        return None
    return record


async def handed_then_killed(client: ArenaClient, root: Path, *, claimed: bool) -> asyncio.Task[Any]:
    """Start a run, let the server hand it to its spare, and SIGKILL the spare before it reads it.

    The spare is stopped (SIGSTOP) first, so it cannot read its order; once
    the lock names it as the run's agent, the order has been written to its
    pipe and the pipe closed. ``claimed``: the run's agent claim is made
    first, as a spare does before anything of the run starts, so the spare
    died as if after it took the run.
    """
    spare = await one_spare(client)
    spare.suspend()
    start = asyncio.ensure_future(client.call("arena/start", {"id": "quick"}))
    lock = await wait_for(
        lambda: (record := lock_of(root)) and record.get("agentPid") == spare.pid and record,
        what="the run handed to the spare",
    )
    if claimed:
        (run_dir(root, lock["runId"]) / AGENT_CLAIM).write_text(str(spare.pid))
    spare.kill()  # a stopped process dies at once, having read nothing
    return start


async def test_a_spare_killed_after_it_was_handed_the_run_means_a_cold_start(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3", "--interval", "0.01")])
    client = await start_server(root)
    try:
        spare = await one_spare(client)
        start = await handed_then_killed(client, root, claimed=False)
        info = await start
        assert info["agentPid"] != spare.pid
        folder = run_dir(root, info["runId"])
        assert (folder / AGENT_CLAIM).read_text() == str(info["agentPid"]), "the cold agent took the run"
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded", final
        lines = await all_logs(client, info["runId"])
        assert sum(line["text"].startswith("argv: ") for line in lines) == 1, "the trainer started once"
        assert sum(line["text"].startswith("starting quick") for line in lines) == 1, lines
    finally:
        await stop_server(client)


async def test_a_spare_that_died_after_it_took_the_run_is_not_started_again(tmp_path: Path) -> None:
    """The spare may have started the trainer (it died with it): the start fails, nothing runs twice."""
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3", "--interval", "0.01")])
    client = await start_server(root)
    try:
        start = await handed_then_killed(client, root, claimed=True)
        with pytest.raises(JsonRpcException) as failed:
            await start
        error = failed.value
        assert (error.code, error.data["reason"]) == (1009, "launch-failed"), error
        assert "exited with code -9" in error.data["evidence"], "the spare's death, not a cold agent's"
        folder = run_dir(root, error.data["runId"])
        assert (
            not (folder / "agent.log").exists() or "nothing started" not in (folder / "agent.log").read_text()
        )
        assert not (folder / "output.log").exists() or b"argv: " not in (folder / "output.log").read_bytes()
        status = await client.call("arena/status", {})
        assert status["active"] is None
        info = await client.call("arena/start", {"id": "quick"})  # the workspace is free: the next start runs
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded", final
    finally:
        await stop_server(client)


CLAIM_CHECK = """
import os, sys
claim = os.path.join(os.path.dirname(os.environ["ARENA_STOP_FILE"]), ".agent.claim")
with open(claim) as handle:
    owner = handle.read()
print(f"claimed by {owner}, started by {os.getppid()}", flush=True)
sys.exit(0 if owner == str(os.getppid()) else 3)
"""


async def test_an_agent_claims_its_run_before_the_trainer_starts_and_only_one_can(tmp_path: Path) -> None:
    root = make_workspace(tmp_path / "ws", [job("check", args=["claim_check.py"])])
    (root / "claim_check.py").write_text(CLAIM_CHECK)
    client = await start_server(root)
    try:
        spare = await one_spare(client)
        info = await client.call("arena/start", {"id": "check"})
        assert info["agentPid"] == spare.pid
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded", final
        texts = [line["text"] for line in await all_logs(client, info["runId"])]
        assert f"claimed by {spare.pid}, started by {spare.pid}" in texts, texts
        folder = run_dir(root, info["runId"])
        second = subprocess.run(
            [sys.executable, "-m", "arena_ls.agent.launch", str(folder)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert second.returncode == CLAIM_REFUSED_EXIT, second
        assert "another job agent has already taken the run" in second.stderr
        again = [line["text"] for line in await all_logs(client, info["runId"])]
        assert again == texts, "a second agent started nothing"
    finally:
        await stop_server(client)


# --------------------------------------------------------------------------- spares that keep dying


async def test_three_spares_dying_unasked_end_the_spare_keeping_and_starts_go_cold(
    tmp_path: Path,
) -> None:
    root = make_workspace(tmp_path / "ws", [job("quick", "--steps", "3", "--interval", "0.01")])
    server_log = tmp_path / "server.log"
    command = ["sh", "-c", f'exec "{sys.executable}" -m arena_ls 2>>"{server_log}"']
    client = await start_server(root, command=command)
    warning = f"the spare job agent died {MOST_DEATHS} times unasked"
    try:
        killed: list[int] = []
        for _ in range(MOST_DEATHS):
            spare = await one_spare(client, but_not=killed[-1] if killed else None)
            assert spare.pid not in killed
            spare.kill()
            killed.append(spare.pid)
            await wait_for(lambda pid=spare.pid: spare_gone(pid), what=f"the spare {spare.pid} to die")
            await client.call("arena/status", {})  # an idle round: it sees the death
        await wait_for(lambda: warning in server_log.read_text(), what="the warning on stderr")
        for _ in range(3):
            await client.call("arena/status", {})  # each an idle round: one would start a spare
        assert spares_of(client) == [], "a fourth spare was started"
        info = await client.call("arena/start", {"id": "quick"})
        assert info["agentPid"] not in killed
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost")
        assert final["status"] == "succeeded", final
        await client.call("arena/status", {})  # idle again after the run
        assert spares_of(client) == []
        assert server_log.read_text().count(warning) == 1
    finally:
        await stop_server(client)
