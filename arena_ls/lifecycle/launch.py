"""The job agent's entry point: start the trainer and its capture first, then load the rest.

Started by a server as ``python -m arena_ls.lifecycle.launch RUN_DIR``.
Loading the agent (attrs, cattrs, psutil, the state folder's converters)
takes over 100 ms of imports, and neither the trainer nor its first lines
need wait for them: this module reads the run's spec with plain ``json``,
starts the trainer and the pumps that copy its output into the run's log
(``outputlog``, standard library only), and hands all of it to ``Agent``,
which records the trainer and takes over as if it had started it itself.

Whatever goes wrong here (an unreadable spec, say) is left to the agent,
which starts the trainer the usual way and reports the problem.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from arena_ls import platform
from arena_ls.lifecycle.outputlog import ARENA, READ_CHUNK, OutputWriter, Pump, start_pumps


class EarlyLaunch:
    """A trainer started before the agent was loaded, with its capture; or why it could not start."""

    __slots__ = ("argv", "error", "process", "pumps", "started_at", "writer")

    def __init__(
        self,
        argv: list[str],
        writer: OutputWriter,
        started: tuple[subprocess.Popen[bytes], list[Pump]] | None,
        error: OSError | None,
    ) -> None:
        self.argv = argv
        self.writer = writer
        self.process: subprocess.Popen[bytes] | None = started[0] if started is not None else None
        self.pumps: list[Pump] = started[1] if started is not None else []
        self.error = error
        self.started_at = time.time()


def trainer_argv(argv: Sequence[str], resume_args: Sequence[str], step: int | None) -> list[str]:
    """The trainer's argv: the job's args, plus ``resume.args`` when resuming from ``step``."""
    if step is None or not resume_args:
        return list(argv)
    return [*argv, *(arg.replace("{step}", str(step)) for arg in resume_args)]


UTF8_OUTPUT = {"PYTHONIOENCODING": "utf-8", "PYTHONUTF8": "1"}
"""A Python trainer writes UTF-8 to its pipes (on Windows it would use the ANSI code page,
strictly: ``print("✓")`` would crash it), unless the job's env chooses an encoding itself."""


def trainer_env(job_env: Mapping[str, str], run_id: str, job_id: str, stop_file: Path) -> dict[str, str]:
    """The trainer's environment: ours, UTF-8 output, the job's, and the contract's ``ARENA_*`` variables."""
    env = dict(os.environ)
    if not any(name in job_env for name in UTF8_OUTPUT):
        env.update(UTF8_OUTPUT)
    env.update(job_env)
    env.update(
        {
            "ARENA_RUN_ID": run_id,
            "ARENA_JOB_ID": job_id,
            "ARENA_STOP_FILE": str(stop_file),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def start_trainer(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the trainer with both outputs on pipes of ``platform.TRAINER_PIPE_BYTES``."""
    process = platform.spawn_trainer(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            platform.enlarge_pipe(pipe.fileno())
    return process


def start_captured(
    argv: list[str], cwd: Path, env: dict[str, str], writer: OutputWriter
) -> tuple[subprocess.Popen[bytes], list[Pump]]:
    """Start the trainer and the pumps that copy its stdout and stderr into the run's output."""
    process = start_trainer(argv, cwd, env)
    assert process.stdout is not None and process.stderr is not None
    coalesce = platform.pipe_size(process.stdout.fileno()) >= READ_CHUNK
    return process, start_pumps(process.stdout, process.stderr, writer, coalesce)


def starting_line(job_id: str, argv: list[str]) -> str:
    """The run's log line that announces each launch."""
    return f"starting {job_id}: {' '.join(argv)}"


def launch_from_spec(run_dir: Path) -> EarlyLaunch | None:
    """Start the trainer that ``spec.json`` describes; None when the spec cannot be read plainly."""
    try:
        spec: Any = json.loads((run_dir / "spec.json").read_text(encoding="utf-8"))
        argv = trainer_argv(
            [str(a) for a in spec["argv"]],
            [str(a) for a in spec.get("resumeArgs") or []],
            spec.get("resumedFromStep"),
        )
        env = trainer_env(
            {str(k): str(v) for k, v in (spec.get("env") or {}).items()},
            str(spec["runId"]),
            str(spec["jobId"]),
            run_dir / "STOP",
        )
        cwd = Path(spec["cwd"])
        job_id = str(spec["jobId"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    writer = OutputWriter(run_dir)
    writer.append_line(ARENA, starting_line(job_id, argv))
    try:
        return EarlyLaunch(argv, writer, start_captured(argv, cwd, env, writer), None)
    except OSError as error:
        return EarlyLaunch(argv, writer, None, error)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m arena_ls.lifecycle.launch RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    platform.become_subreaper()  # before the trainer exists, so no orphan of its escapes us
    early = launch_from_spec(run_dir)
    from arena_ls.lifecycle.agent import main as agent_main

    return agent_main([str(run_dir)], early=early)


if __name__ == "__main__":
    sys.exit(main())
