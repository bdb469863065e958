"""A long history of finished runs, made fast: copies of one real run's folder (tests and benchmarks)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder
from tests.helpers.waiting import wait_until

AGENT_LETS_GO = 60.0
"""The longest the template's agent may take, after its run reads as ended, to let the run go."""


def wait_let_go(template: Path, timeout: float = AGENT_LETS_GO) -> None:
    """Wait until no agent holds the run of ``template``: its state reads final a moment before its
    agent discards the final state's reserve (``state.reserve``), closes the log and frees the lock."""
    lock = RunLock(StateFolder(template.parent.parent))
    wait_until(lambda: lock.holder() != template.name, f"the agent of {template.name} to let it go", timeout)


def clone_runs(root: Path, template: Path, count: int) -> None:
    """``count`` copies of a finished run's folder, each with its own run id (oldest first); once
    its agent has let it go, so that no file is copied while the agent removes it."""
    wait_let_go(template)
    runs = template.parent
    spec = json.loads((template / "spec.json").read_text())
    state = json.loads((template / "state.json").read_text())
    created = (template / "spec.json").stat().st_mtime - count - 1  # all older than the template
    for index in range(count):
        run_id = f"{spec['jobId']}-clone-{index:06d}"
        target = runs / f".new-{run_id}"  # built aside, then renamed in whole, as RunLock.claim does
        target.mkdir()
        for entry in template.iterdir():
            if entry.is_file() and entry.name not in ("spec.json", "state.json"):
                shutil.copy2(entry, target / entry.name)
        stamp = created + index
        (target / "spec.json").write_text(json.dumps({**spec, "runId": run_id, "createdAt": stamp}))
        os.utime(target / "spec.json", (stamp, stamp))
        (target / "state.json").write_text(json.dumps({**state, "runId": run_id}))
        os.rename(target, runs / run_id)
