"""``arena/start`` answers from what the launcher knows, and the run's state tells one story.

Real processes end to end: ``arena-ls`` over stdio, its agents and trainers.
A ``sitecustomize`` on the server's ``PYTHONPATH`` (inherited by its agents)
can hold the agent's import until the test releases it, so "the answer came
before the agent loaded" is a fact the test arranges rather than a race it
hopes to win; it also keeps a copy of every ``state.json`` written, in order.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.lifecycle.spare import DISABLE_VARIABLE
from arena_ls.run.runlock import RunLock, Verdict
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.states import LEGAL_MOVES, RunStatus
from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    job,
    make_workspace,
    poll_until,
    spares_of,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

AGENT_GATE_AND_STATE_LOG = """
import os, sys, time

_GATE = os.environ.get("ARENA_TEST_AGENT_GATE")
_LOG = os.environ.get("ARENA_TEST_STATE_LOG")


class _HoldTheAgent:
    \"\"\"Holds the import of the agent module until the gate file exists (at most 120 s).

    It holds the module's execution, as a slow import does, and not the
    finder: a finder runs under the interpreter's global import lock, which
    a fork with a ``preexec_fn`` (the trainer's start) must take too.
    \"\"\"

    def find_spec(self, name, path=None, target=None):
        if name != "arena_ls.agent.local.agent":
            return None
        import importlib.machinery
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = _HeldLoader(spec.loader)
        return spec


class _HeldLoader:
    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        deadline = time.monotonic() + 120
        while not os.path.exists(_GATE) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.real.exec_module(module)


if _GATE:
    sys.meta_path.insert(0, _HoldTheAgent())

if _LOG:
    _real_replace = os.replace

    def _recording_replace(src, dst, *args, **kwargs):
        if str(dst).endswith("state.json"):
            with open(src, "rb") as written, open(_LOG, "ab") as log:
                log.write(b" ".join(written.read().split()) + b"\\n")
        return _real_replace(src, dst, *args, **kwargs)

    os.replace = _recording_replace
"""

STATE_WRITES_FAIL = """
import errno, os
_real_replace = os.replace
def _full_replace(src, dst, *args, **kwargs):
    if str(dst).endswith("state.json"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
    return _real_replace(src, dst, *args, **kwargs)
os.replace = _full_replace
"""


class Harness:
    """The injected ``sitecustomize``, its gate file and its log of written states."""

    def __init__(self, tmp_path: Path, code: str = AGENT_GATE_AND_STATE_LOG) -> None:
        self.inject = tmp_path / "inject"
        self.inject.mkdir()
        (self.inject / "sitecustomize.py").write_text(code)
        self.gate = tmp_path / "agent-may-load"
        self.log = tmp_path / "states.jsonl"

    @property
    def env(self) -> dict[str, str]:
        return {
            "PYTHONPATH": str(self.inject),
            "ARENA_TEST_AGENT_GATE": str(self.gate),
            "ARENA_TEST_STATE_LOG": str(self.log),
        }

    def release_agent(self) -> None:
        self.gate.write_text("go\n")

    def states(self, run_id: str) -> list[dict[str, Any]]:
        """Every ``state.json`` the run's processes wrote, in order."""
        if not self.log.exists():
            return []
        written = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        return [state for state in written if state["runId"] == run_id]


@pytest.fixture(params=["spare", "cold"])
def agent_start(request: pytest.FixtureRequest) -> str:
    """Each case twice: the run handed to the server's spare agent (POSIX), and a cold agent."""
    if request.param == "spare" and not platform.SPARE_AGENT:
        pytest.skip("Windows starts every agent cold")
    return str(request.param)


async def server(root: Path, env: dict[str, str], agent_start: str) -> ArenaClient:
    """A server on ``root``; with ``spare``, once its spare agent is waiting (so the start uses it)."""
    if agent_start == "cold":
        return await start_server(root, env={**env, DISABLE_VARIABLE: "1"})
    client = await start_server(root, env=env)
    await wait_for(lambda: spares_of(client), what="the server's spare agent")
    return client


def reachable(start: RunStatus) -> set[RunStatus]:
    """Every status a run in ``start`` can reach by legal moves (the writer folds quick ones together)."""
    seen: set[RunStatus] = set()
    todo = [start]
    while todo:
        for target in LEGAL_MOVES[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def assert_one_story(statuses: list[str]) -> None:
    """Each status repeats the one before or is reachable from it by legal moves: never a step back."""
    assert statuses, "no status at all"
    for before, after in itertools.pairwise(statuses):
        if before != after:
            assert RunStatus(after) in reachable(RunStatus(before)), f"{before} -> {after} in {statuses}"
    assert RunStatus.STARTING.value not in statuses[1:], statuses


def assert_generations_rise(states: list[dict[str, Any]]) -> None:
    generations = [state["generation"] for state in states]
    assert generations == list(range(1, len(generations) + 1)), generations


def launcher_records(harness: Harness, run_id: str) -> list[tuple[int, str]]:
    """(generation, status) of every state written so far: the launcher's alone while the agent is held."""
    return [(state["generation"], state["status"]) for state in harness.states(run_id)]


async def run_status(client: ArenaClient, run_id: str) -> dict[str, Any]:
    result = await client.call("arena/status", {})
    return next(run for run in result["runs"] if run["runId"] == run_id)


async def test_the_answer_carries_the_trainer_pid_before_the_agent_has_loaded(
    tmp_path: Path, agent_start: str
) -> None:
    trainer = job("train", "--steps", "40", "--interval", "0.05", kind="train")
    root = make_workspace(tmp_path / "ws", [trainer])
    harness = Harness(tmp_path)
    client = await server(root, harness.env, agent_start)
    try:
        info = await client.call("arena/start", {"id": "train"})
        answered = len(client.statuses)  # every notification from here on was sent after the answer
        run_id = info["runId"]
        assert info["status"] == "running" and isinstance(info["pid"], int), info
        assert isinstance(info["agentPid"], int) and info["startedAt"], info
        first = harness.states(run_id)
        assert [(s["generation"], s["status"], s["pid"]) for s in first] == [(1, "running", info["pid"])], (
            "the launcher's record alone: the agent is held before its import"
        )

        async def progress_shown() -> bool:
            return ((await run_status(client, run_id)).get("step") or 0) >= 2

        await poll_until(progress_shown, "the trainer's progress, the agent still held")
        shown = await run_status(client, run_id)
        assert shown["status"] == "running", "never starting while the trainer prints progress"
        assert len(harness.states(run_id)) == 1, "still only the launcher's record"

        harness.release_agent()
        final = await wait_status(client, run_id, "succeeded", "crashed", "stopped", "lost")
        assert final["status"] == "succeeded" and final["pid"] == info["pid"], final
        states = harness.states(run_id)
        assert_generations_rise(states)
        assert_one_story([s["status"] for s in states])
        assert {(s["pid"], s["startedAt"], s["agentPid"]) for s in states} == {
            (info["pid"], first[0]["startedAt"], info["agentPid"])
        }, "the agent continues the launcher's record: one trainer, one start, one agent"
        assert_one_story(client.status_of(run_id))
        after = [s["status"] for s in client.statuses[answered:] if s["runId"] == run_id]
        assert_one_story([info["status"], *after])
    finally:
        harness.release_agent()
        await stop_server(client)


async def assert_the_workspace_is_free(root: Path) -> None:
    """Free at once for the next start (a lock left is judged stale: its run has ended), and the
    agent removes its lock: it writes the final state first, then closes the log (an fsync, slow on
    a loaded machine) and releases the lock, so the file may outlive the final status briefly."""
    lock = RunLock(StateFolder(root / ".aide" / "training"))
    judged = lock.judge_now()
    assert judged is None or judged.verdict is Verdict.STALE, judged
    lock_file = root / ".aide" / "training" / "active.lock"

    async def released() -> bool:
        return not lock_file.exists()

    await poll_until(released, "the agent to release active.lock")


async def test_a_trainer_that_dies_at_once_is_answered_then_crashes_with_its_evidence(
    tmp_path: Path, agent_start: str
) -> None:
    root = make_workspace(tmp_path / "ws", [job("dies", "--steps", "0", "--exit-code", "3")])
    harness = Harness(tmp_path)
    client = await server(root, harness.env, agent_start)
    try:
        info = await client.call("arena/start", {"id": "dies"})
        answered = len(client.statuses)  # every notification from here on was sent after the answer
        run_id = info["runId"]
        assert (info["status"], isinstance(info["pid"], int)) == ("running", True), info

        async def trainer_done() -> bool:
            return any(line["text"] == "done" for line in await all_logs(client, run_id))

        await poll_until(trainer_done, "the trainer's last line (it exits at once)")
        harness.release_agent()
        final = await wait_status(client, run_id, "succeeded", "crashed", "stopped", "lost")
        assert (final["status"], final["exitCode"], final["pid"]) == ("crashed", 3, info["pid"]), final
        assert final["failure"]["kind"] == "error" and final["failure"]["evidence"], final
        status = await client.call("arena/status", {})
        assert status["active"] is None
        await assert_the_workspace_is_free(root)
        states = harness.states(run_id)
        assert_generations_rise(states)
        assert_one_story([s["status"] for s in states])
        assert_one_story(client.status_of(run_id))
        after = [s["status"] for s in client.statuses[answered:] if s["runId"] == run_id]
        assert_one_story([info["status"], *after])
    finally:
        harness.release_agent()
        await stop_server(client)


async def test_a_run_that_cannot_be_recorded_is_1009_even_if_its_trainer_dies_at_once(
    tmp_path: Path,
    agent_start: str,
) -> None:
    """Neither the launcher's record nor the agent's can be written: 1009 with the cause."""
    root = make_workspace(tmp_path / "ws", [job("dies", "--steps", "0", "--exit-code", "3")])
    harness = Harness(tmp_path, STATE_WRITES_FAIL)
    client = await server(root, {"PYTHONPATH": str(harness.inject)}, agent_start)
    try:
        error = await client.call_error("arena/start", {"id": "dies"})
        assert (error.code, error.data["reason"]) == (1009, "launch-failed")
        assert "No space left on device" in error.data["evidence"]
        status = await client.call("arena/status", {})
        assert status["active"] is None
        failed = next(r for r in status["runs"] if r["runId"] == error.data["runId"])
        assert failed["status"] == "lost" and failed["failure"]["kind"] == "disk-full"
        assert not (root / ".aide" / "training" / "active.lock").exists()
    finally:
        await stop_server(client)


async def test_a_checkpoint_announced_while_the_agent_loads_lets_the_run_stop(
    tmp_path: Path, agent_start: str
) -> None:
    """The trainer runs before its agent has loaded: a checkpoint in its log counts before the state has."""
    trainer = job("train", "--steps", "100000", "--interval", "0.02", "--ckpt-every", "3", kind="train")
    root = make_workspace(tmp_path / "ws", [trainer])
    harness = Harness(tmp_path)
    client = await server(root, harness.env, agent_start)
    try:
        info = await client.call("arena/start", {"id": "train"})
        run_id = info["runId"]

        async def checkpoint_logged() -> bool:
            return any('"checkpoint"' in line["text"] for line in await all_logs(client, run_id))

        await poll_until(checkpoint_logged, "a checkpoint line, the agent still held")
        assert [s["lastCheckpoint"] for s in harness.states(run_id)] == [None], "not in the state yet"
        asked = await client.call("arena/stop", {"wait": False})
        assert asked["runId"] == run_id, "stopped without confirm: the checkpoint was announced"
        harness.release_agent()
        final = await wait_status(client, run_id, "stopped", "succeeded", "crashed", "lost")
        assert final["status"] == "stopped" and final["lastCheckpoint"] is not None, final
    finally:
        harness.release_agent()
        await stop_server(client)


async def test_a_stop_asked_while_the_agent_loads_is_begun_at_once(tmp_path: Path, agent_start: str) -> None:
    """The launcher creates the stop file itself; the agent, once loaded, finishes the same stop."""
    root = make_workspace(tmp_path / "ws", [job("coop", "--steps", "100000", "--interval", "0.02")])
    harness = Harness(tmp_path)
    client = await server(root, harness.env, agent_start)
    try:
        info = await client.call("arena/start", {"id": "coop"})
        run_id = info["runId"]
        await client.call("arena/stop", {"wait": False})

        async def trainer_stopped() -> bool:
            return any(line["text"] == "stopping cooperatively" for line in await all_logs(client, run_id))

        await poll_until(trainer_stopped, "the trainer honouring the stop file, the agent still held")
        await wait_for(lambda: launcher_records(harness, run_id) == [(1, "running"), (2, "stopping")])
        harness.release_agent()
        final = await wait_status(client, run_id, "stopped", "succeeded", "crashed", "lost")
        assert (final["status"], final["stoppedBy"], final["exitCode"]) == ("stopped", "file", 0), final
        assert_one_story([s["status"] for s in harness.states(run_id)])
    finally:
        harness.release_agent()
        await stop_server(client)


async def test_a_kill_asked_while_the_agent_loads_is_done_at_once(tmp_path: Path, agent_start: str) -> None:
    root = make_workspace(tmp_path / "ws", [job("stubborn", "--steps", "100000", "--ignore-stop")])
    harness = Harness(tmp_path)
    client = await server(root, harness.env, agent_start)
    try:
        info = await client.call("arena/start", {"id": "stubborn"})
        run_id = info["runId"]
        created = harness.states(run_id)[0]["pidCreateTime"]
        await client.call("arena/stop", {"kill": True, "wait": False})
        await wait_for(lambda: not platform.is_same_process(info["pid"], created), what="the trainer killed")
        await wait_for(lambda: launcher_records(harness, run_id) == [(1, "running"), (2, "stopping")])
        harness.release_agent()
        final = await wait_status(client, run_id, "stopped", "succeeded", "crashed", "lost")
        assert (final["status"], final["stoppedBy"]) == ("stopped", "kill"), final
        assert_one_story([s["status"] for s in harness.states(run_id)])
    finally:
        harness.release_agent()
        await stop_server(client)
