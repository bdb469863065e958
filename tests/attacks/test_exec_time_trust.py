"""The trust boundary at exec time (issue 24 item 6): gated paths are resolved again right before
each exec, in the process that execs the trainer, on every path (a cold launcher, a spare agent,
the agent's relaunch).

The outside script writes a marker file: the tests assert it never appears. The swap after the
gates is made deterministic: a ``sitecustomize`` in the agents' environment swaps the trainer for a
link out of the workspace at the moment the launcher reads ``spec.json`` (a loader wraps
``launch_from_spec`` once ``trainer_start`` has executed), the tightest window an outside process
could hit. Before a relaunch the test swaps it itself while the first trainer runs, then kills
that trainer so that the watchdog relaunches.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lsp import (
    job,
    make_workspace,
    poll_until,
    spares_of,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

SWAP_AT_SPEC = r"""
import importlib.abc, importlib.machinery, os

_TARGET, _LINK = os.environ["ARENA_TEST_SWAP"].split(os.pathsep)


def _swap():
    if os.path.islink(_TARGET):
        return
    temporary = _TARGET + ".swap"
    os.symlink(_LINK, temporary)
    os.replace(temporary, _TARGET)


class _SwapWhenTheSpecIsRead(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "arena_ls.agent.trainer_start":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            launch_from_spec = module.launch_from_spec

            def swapped_first(run_dir):
                _swap()
                return launch_from_spec(run_dir)

            module.launch_from_spec = swapped_first

        spec.loader.exec_module = exec_module
        return spec


import sys
sys.meta_path.insert(0, _SwapWhenTheSpecIsRead())
"""

OUTSIDE = """
import pathlib, sys
pathlib.Path({marker!r}).write_text("the outside code ran")
print("outside code ran")
"""


def _outside(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    marker = tmp_path / "MARKER"
    script = outside / "evil.py"
    script.write_text(OUTSIDE.format(marker=str(marker)))
    return script, marker


@pytest.mark.parametrize("spare", [True, False], ids=["spare-agent", "cold-launch"])
async def test_a_trainer_swapped_for_an_outside_link_once_the_spec_appears_never_runs(
    tmp_path: Path, spare: bool
) -> None:
    evil, marker = _outside(tmp_path)
    root = make_workspace(tmp_path / "ws", [job("t", "--steps", "50", kind="train")])
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SWAP_AT_SPEC)
    env = {
        "PYTHONPATH": str(inject),
        "ARENA_TEST_SWAP": os.pathsep.join([str(root / "fake_trainer.py"), str(evil)]),
    }
    if not spare:
        env["ARENA_NO_SPARE_AGENT"] = "1"
    client = await start_server(root, env=env)
    try:
        if spare:
            await client.call("arena/status", {})
            await wait_for(lambda: spares_of(client), what="the server's spare agent")
        error = await client.call_error("arena/start", {"id": "t"})
        assert (error.code, error.data["reason"]) == (1009, "launch-failed"), error
        evidence = error.data["evidence"]
        assert "fake_trainer.py" in evidence and "outside the workspace" in evidence, evidence
        assert (root / "fake_trainer.py").is_symlink(), "the swap happened"
        status = await client.call("arena/status", {})
        run = next(r for r in status["runs"] if r["runId"] == error.data["runId"])
        assert run["failure"]["kind"] == "error" and "outside the workspace" in run["failure"]["evidence"]
        assert status["active"] is None
        assert not marker.exists(), "the outside code ran"
    finally:
        await stop_server(client)
    assert not marker.exists(), "the outside code ran"


async def _running_with_progress(client: Any, job_id: str) -> dict[str, Any]:
    """The run, once its first trainer has made progress (it has read its script for good)."""
    info = await client.call("arena/start", {"id": job_id})
    found: dict[str, Any] = {}

    async def has_stepped() -> bool:
        status = await client.call("arena/status", {})
        run = next(r for r in status["runs"] if r["runId"] == info["runId"])
        found.update(run)
        return bool(run["status"] == "running" and (run.get("step") or 0) >= 2)

    await poll_until(has_stepped, "the first trainer's progress")
    return found


@pytest.mark.parametrize("change", ["outside-link", "new-content"])
async def test_a_trainer_changed_before_a_watchdog_relaunch_is_refused(tmp_path: Path, change: str) -> None:
    evil, marker = _outside(tmp_path)
    spec = job(
        "t", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "1", kind="train",
        restart={"maxRestarts": 3, "backoffSeconds": 0.05},
    )  # fmt: skip
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        run = await _running_with_progress(client, "t")
        trainer = root / "fake_trainer.py"
        if change == "outside-link":
            trainer.unlink()
            trainer.symlink_to(evil)
        else:
            trainer.write_text(evil.read_text())
        os.kill(run["pid"], signal.SIGKILL)  # a crash: the watchdog relaunches
        final = await wait_status(client, run["runId"], "crashed", "succeeded", "stopped", "lost")
        assert final["status"] == "crashed", final
        assert final["failure"]["kind"] == "error", final
        expected = "outside the workspace" if change == "outside-link" else "changed since the gates passed"
        assert expected in final["failure"]["evidence"], final
        assert not marker.exists(), "the outside code ran"
    finally:
        await stop_server(client)
    assert not marker.exists(), "the outside code ran"
