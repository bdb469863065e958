"""Windows sharing violations, simulated in real processes on Linux.

On Windows, replacing ``state.json`` while a server (or antivirus, the
indexer, OneDrive) has it open fails with PermissionError (WinError 32), and
so does opening it while it is being replaced. A ``sitecustomize`` put on
the ``PYTHONPATH`` of the server and of the agent it starts makes
``os.replace`` onto ``state.json`` and ``open`` of ``state.json`` raise
exactly that, in bursts, inside real runs; every raised fault is counted in
a file, so a run the faults never reached fails the test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.rundir import RunDir
from tests.helpers.lsp import (
    all_logs,
    job,
    make_workspace,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)
from tests.helpers.waiting import wait_until
from tests.lifecycle.test_launch import FAKE_TRAINER, write_run

SITECUSTOMIZE = r'''
"""Test fault hook: WinError 32 on os.replace onto state.json and on opening it for reading."""
import builtins
import errno
import json
import os
import threading

_config = json.loads(os.environ.get("ARENA_TEST_SHARING_FAULTS", "null"))
if _config:
    _lock = threading.Lock()
    _bursts = list(_config.get("bursts", []))
    _left = {"burst": 0, "stopping": _config.get("stopping", 0), "reads": _config.get("reads", 0)}
    _reads_seen = [0]
    _real_replace, _real_open = os.replace, builtins.open

    def _fault(kind, path):
        fd = os.open(_config["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{kind} {os.getpid()}\n".encode())
        os.close(fd)
        error = PermissionError(
            errno.EACCES, "The process cannot access the file because it is being used by another process",
            str(path),
        )
        error.winerror = 32
        return error

    def _replace(src, dst, *args, **kwargs):
        if str(dst).endswith("state.json"):
            with _lock:
                stopping = _left["stopping"] > 0 and b'"stopping"' in _real_open(src, "rb").read()
                if stopping:
                    _left["stopping"] -= 1
                    raise _fault("stopping", dst)
                if _left["burst"] == 0 and _bursts:
                    _left["burst"] = _bursts.pop(0)
                if _left["burst"] > 0:
                    _left["burst"] -= 1
                    raise _fault("replace", dst)
                if _bursts:
                    _left["burst"] = -1  # one clean write between bursts
                elif _left["burst"] < 0:
                    _left["burst"] = 0
        return _real_replace(src, dst, *args, **kwargs)

    def _open(file, mode="r", *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and str(file).endswith("state.json") and "r" in mode:
            with _lock:
                _reads_seen[0] += 1
                if _left["reads"] > 0 and _reads_seen[0] % 3 != 0:
                    _left["reads"] -= 1
                    raise _fault("read", file)
        return _real_open(file, mode, *args, **kwargs)

    os.replace = _replace
    builtins.open = _open
'''


def fault_env(tmp_path: Path, **config: Any) -> tuple[dict[str, str], Path]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    log = tmp_path / "faults.log"
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {
        "PYTHONPATH": os.pathsep.join(paths),
        "ARENA_TEST_SHARING_FAULTS": json.dumps({"log": str(log), **config}),
    }
    return env, log


def faults(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            kind = line.split()[0]
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def hammer(path: Path, stop: threading.Event) -> threading.Thread:
    """A reader that keeps state.json open as often as it can (as a polling server does)."""

    def read_forever() -> None:
        while not stop.is_set():
            try:
                with open(path, "rb") as handle:
                    handle.read()
            except OSError:
                stop.wait(0.001)

    thread = threading.Thread(target=read_forever, daemon=True)
    thread.start()
    return thread


async def test_a_run_survives_sharing_violations_with_a_reader_hammering_its_state(tmp_path: Path) -> None:
    root = make_workspace(
        tmp_path / "ws",
        [job("ticker", "--steps", "600", "--interval", "0.01", "--numbered", "--ckpt-every", "50",
             "--hold-at", "300", "--hold-file", str(tmp_path / "go-on"))],
    )  # fmt: skip
    # Bursts of 3 (retried inside one replace), one of 60 (past the replace's retries: the
    # writer thread retries), and reads of state.json failing two times in three. The run waits
    # at step 300 until the second start was refused: on a slow machine the read faults came
    # after its 6 s were over, and the second start found no live run (seen once in CI).
    env, log = fault_env(tmp_path, bursts=[3, 3, 60, 3, 3, 3], reads=400)
    client = await start_server(root, env=env)
    stop = threading.Event()
    try:
        info = await client.call("arena/start", {"id": "ticker"})
        state_path = Path(info["logPath"]).with_name("state.json")
        await wait_for(state_path.exists, what="state.json")
        hammer(state_path, stop)
        await wait_for(lambda: faults(log).get("read", 0) >= 2, what="read faults in the server")
        second = await client.call_error("arena/start", {"id": "ticker"})
        assert "one job at a time" in str(second), "the live run's lock must hold"
        (tmp_path / "go-on").touch()
        final = await wait_status(client, info["runId"], "succeeded", "crashed", "lost", "stopped")
        assert final["status"] == "succeeded" and final["pid"] == info["pid"]
        assert final["lastCheckpoint"]["step"] == 600
        numbered = [
            line["text"]
            for line in await all_logs(client, info["runId"], limit=97)
            if line["text"].startswith("numbered")
        ]
        assert numbered == [f"numbered {i}" for i in range(1, 601)], "no line may be lost"
        status = await client.call("arena/status", {})
        assert [run["runId"] for run in status["runs"]] == [info["runId"]], "one run"
    finally:
        stop.set()
        await stop_server(client)
    counts = faults(log)
    assert counts.get("replace", 0) >= 66, counts  # the bursts up to the long one, at least
    assert counts.get("read", 0) >= 4, counts
    texts = [line.text for line in iter_all_lines(Path(info["logPath"]).parent)]
    assert any("could not record the run's state" in text for text in texts), "the long burst was reported"
    assert "the run's state is recorded again" in texts


@pytest.mark.timeout(120)
def test_a_failing_write_of_stopping_does_not_abort_the_stop(tmp_path: Path) -> None:
    """The STOPPING transition cannot be recorded for seconds: the trainer still stops with its checkpoint."""
    run_path = write_run(
        tmp_path,
        [sys.executable, str(FAKE_TRAINER), "--steps", "100000", "--interval", "0.3", "--ckpt-every", "1"],
        kind="task",
    )
    env, log = fault_env(tmp_path, stopping=50)
    agent = subprocess.Popen(
        [sys.executable, "-m", "arena_ls.agent.launch", str(run_path)], env={**os.environ, **env}
    )
    try:
        run = RunDir(run_path)

        def checkpointed() -> bool:
            try:
                return run.read_state().last_checkpoint is not None
            except (OSError, ValueError):
                return False

        wait_until(checkpointed, "a checkpoint")
        run.request_stop(kill=False, grace_seconds=60, by="test")
        assert agent.wait(timeout=90) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
    state = json.loads((run_path / "state.json").read_text())
    assert state["status"] == "stopped" and state["stoppedBy"] == "file"
    texts = [line.text for line in iter_all_lines(run_path)]
    assert "stopping cooperatively" in texts
    assert state["lastCheckpoint"]["path"] == f"ckpt-{state['lastCheckpoint']['step']}.pt"
    assert faults(log).get("stopping", 0) >= 10, faults(log)
