"""Typed manifest jobs (schema version 1), with the contract's defaults."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import attrs

from arena_ls.diagnostics import Span

JobKind = Literal["train", "task"]
JobStatus = Literal["ready", "approval-required", "disabled"]
StopMethod = Literal["file", "signal", "both"]

PYTHON_PLACEHOLDER = "{python}"
RESUME_PATH_PLACEHOLDER = "{path}"
"""In ``resume.args``: the path of the checkpoint the relaunch resumes from, as announced (contract
8.1); filled by ``arena_ls.agent.resume_args``, which spells it the same."""


@attrs.frozen
class ClusterDecl:
    """A manifest ``clusters`` entry (contract 6.2); settings may give or override its address."""

    name: str
    kind: str = "ray"
    address: str | None = None


@attrs.frozen
class Resources:
    """A cluster job's ``resources``: what its entrypoint reserves on the cluster."""

    gpus: float | None = None
    cpus: float | None = None
    memory_mb: int | None = None

    def to_dict(self) -> dict[str, float]:
        """``{gpus, cpus, memoryMb}`` with only the fields given."""
        pairs = (("gpus", self.gpus), ("cpus", self.cpus), ("memoryMb", self.memory_mb))
        return {key: float(value) for key, value in pairs if value is not None}


@attrs.frozen
class Job:
    """One allowlisted job."""

    id: str
    command: str
    name: str = ""
    kind: JobKind = "task"
    args: tuple[str, ...] = ()
    script: str | None = None
    cwd: str = "."
    env: tuple[tuple[str, str], ...] = ()
    status: JobStatus = "approval-required"
    resume_args: tuple[str, ...] = ()
    stop_method: StopMethod = "file"
    grace_seconds: float = 120.0
    max_restarts: int = 0
    backoff_seconds: float = 5.0
    progress_pattern: str | None = None
    checkpoint_pattern: str | None = None
    checkpoint_history: int = 8
    """``checkpoint.history``: the announced checkpoints the job's record keeps (contract 8.2)."""
    probe_args: tuple[str, ...] | None = None
    """``probe.args``: the job's args for a short probe run; None: the probe runs the job's own args."""
    probe_max_vram_mb: int = 5120
    """``probe.maxVramMb``: the probe fails, and the vram-spill insight fires, above this."""
    probe_required: bool = False
    """``probe.required``: refuse to start (1010) until a probe of the current trainer passed."""
    run_on: str | None = None
    """``runOn``: the name of the cluster the job runs on; None: this machine."""
    resources: Resources = attrs.field(factory=Resources)
    span: Span = attrs.field(factory=lambda: Span(0, 0, 0, 0))
    """Where the job's object starts in the manifest (for code lenses)."""

    @property
    def display_name(self) -> str:
        return self.name or self.id

    def argv(self, python: Sequence[str]) -> list[str]:
        """The command line, never through a shell; ``{python}`` expands to a list."""
        command = list(python) if self.command == PYTHON_PLACEHOLDER else [self.command]
        return [*command, *self.args]

    def resolved_cwd(self, root: Path) -> Path:
        return (root / self.cwd).resolve()

    def resolved_script(self, root: Path) -> Path | None:
        if self.script is None:
            return None
        return (self.resolved_cwd(root) / self.script).resolve()

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)
