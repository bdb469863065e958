"""A run folder for a test that needs one without an agent: claimed as a server claims one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_ls.run.rundir import RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder


def claim_run(root: Path, job_id: str = "job", **spec: Any) -> RunDir:
    """A run of ``job_id`` claimed in ``root``'s state folder (``.aide/training``), its spec written;
    ``spec`` sets the spec's other fields (a ``train`` run of ``x`` in ``.`` by default)."""
    fields: dict[str, Any] = {"job_name": job_id.title(), "kind": "train", "argv": ["x"], "cwd": ".", **spec}

    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id=job_id, **fields)

    return RunLock(StateFolder(root / ".aide" / "training")).claim(job_id, build)
