"""Read one job object of the manifest: its fields, each checked where it sits (AR102, AR104-AR114).

A job with an error is left out of the runnable jobs while the others load
(``loader.py``); ``JobReader`` reports each problem at its value through the
``ManifestDocument`` being loaded.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from arena_ls.diagnostics import Severity, Span
from arena_ls.manifest.document import ManifestDocument, edit_at, escape_pointer
from arena_ls.manifest.model import PYTHON_PLACEHOLDER, RESUME_PATH_PLACEHOLDER, Job, Resources
from arena_ls.manifest.seed import (
    SEED_STEP,
    STEP,
    as_train_job,
    job_text,
    resume_shaped,
)
from arena_ls.validation import (
    BOOLEAN,
    REGEX,
    STRING,
    STRING_LIST,
    STRING_MAP,
    Check,
    Invalid,
    choice,
    integer,
    number,
    shown,
    unknown_fields,
)

JOB_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
BARE_PYTHON = re.compile(r"python(3(\.\d+)?)?(\.exe)?", re.IGNORECASE)
STORE_STUB = re.compile(r"(^|[\\/])WindowsApps[\\/](.*[\\/])?python[^\\/]*\.exe$", re.IGNORECASE)
"""The Microsoft Store stub (``...\\WindowsApps\\python.exe``): it opens the Store, not Python."""

KNOWN_JOB = {
    "id",
    "name",
    "kind",
    "command",
    "args",
    "script",
    "cwd",
    "env",
    "status",
    "resume",
    "stop",
    "restart",
    "progress",
    "checkpoint",
    "probe",
    "runOn",
    "resources",
}
KNOWN_SUB = {
    "resume": {"args"},
    "stop": {"method", "graceSeconds"},
    "restart": {"maxRestarts", "backoffSeconds"},
    "progress": {"pattern"},
    "checkpoint": {"pattern", "history"},
    "probe": {"args", "maxVramMb", "required"},
    "resources": {"gpus", "cpus", "memoryMb"},
}


_KIND = choice("train", "task")
_STATUS = choice("ready", "approval-required", "disabled")
_STOP_METHOD = choice("file", "signal", "both")
_NON_NEGATIVE = number(minimum=0)
_COUNT = integer(minimum=0)
_POSITIVE_INT = integer(minimum=1)


class JobReader:
    """Reads one job object, reporting each problem at its value."""

    def __init__(self, loader: ManifestDocument, raw: dict[str, Any], pointer: str) -> None:
        self.loader = loader
        self.raw = raw
        self.pointer = pointer
        self.ok = True
        self.sections: dict[str, dict[str, Any]] = {}

    def report(
        self, code: str, message: str, field: str = "", severity: Severity = "error", data: Any = None
    ) -> None:
        pointer = f"{self.pointer}/{field}" if field else self.pointer
        self.loader.report(code, message, pointer, severity, data=data)
        if severity == "error":
            self.ok = False

    def get(self, field: str, check: Check[Any], default: Any = None) -> Any:
        if field not in self.raw:
            return default
        value = self.raw[field]
        try:
            return check.parse(value, (field,))
        except Invalid as error:
            self.report("AR102", f"{error.message} (found {shown(value)})", field)
            return default

    def section(self, name: str) -> dict[str, Any]:
        """A sub-object such as ``stop``: checked, and its unknown keys reported, once."""
        if name in self.sections:
            return self.sections[name]
        block = self.raw.get(name)
        if block is None:
            block = {}
        elif not isinstance(block, dict):
            self.report("AR102", f"`{name}` must be an object", name)
            block = {}
        for key in unknown_fields(block, KNOWN_SUB[name]):
            message = f"unknown field `{name}.{key}` (ignored)"
            self.report("AR102", message, f"{name}/{escape_pointer(key)}", "warning")
        self.sections[name] = block
        return block

    def sub(self, section: str, field: str, check: Check[Any], default: Any) -> Any:
        block = self.section(section)
        if field not in block:
            return default
        try:
            return check.parse(block[field], (section, field))
        except Invalid as error:
            self.report("AR102", error.message, f"{section}/{field}")
            return default

    def read(self) -> Job | None:
        for key in unknown_fields(self.raw, KNOWN_JOB):
            self.report("AR102", f"unknown job field `{key}` (ignored)", escape_pointer(key), "warning")
        job_id = self.raw.get("id")
        if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
            message = "`id` is required" if job_id is None else "`id` must match [a-z0-9][a-z0-9._-]{0,63}"
            self.report("AR102", message, "id" if "id" in self.raw else "")
            return None
        command = self.raw.get("command")
        if not isinstance(command, str) or not command:
            self.report(
                "AR102",
                "`command` is required: an executable or {python}",
                "command" if "command" in self.raw else "",
            )
            command = ""
        elif BARE_PYTHON.fullmatch(command) or STORE_STUB.search(command):
            what = (
                "the Microsoft Store stub (it opens the Store, not Python)"
                if STORE_STUB.search(command)
                else f"a bare `{command}`"
            )
            self.report(
                "AR104",
                f'`command` is {what}: use "{PYTHON_PLACEHOLDER}" so the '
                "workspace's configured interpreter runs the job",
                "command",
                data=self.replace_fix("command", '"{python}"', "Use {python}"),
            )
        kind = self.get("kind", _KIND, "task")
        args = self.get("args", STRING_LIST, [])
        default_script = next((a for a in args if a.endswith(".py")), None) if kind == "train" else None
        script = self.get("script", STRING, default_script)
        cwd = self.get("cwd", STRING, ".")
        env = self.get("env", STRING_MAP, {})
        status = self.get("status", _STATUS, "approval-required")
        if self.loader.approval == "always" and status == "ready":
            status = "approval-required"
        self.get("name", STRING)
        resume_args = self.sub("resume", "args", STRING_LIST, [])
        job = Job(
            id=job_id,
            command=command,
            name=str(self.raw["name"]) if isinstance(self.raw.get("name"), str) else job_id,
            kind=kind,
            args=tuple(args),
            script=script,
            cwd=cwd,
            env=tuple(env.items()),
            status=status,
            resume_args=tuple(resume_args),
            stop_method=self.sub("stop", "method", _STOP_METHOD, "file"),
            grace_seconds=float(self.sub("stop", "graceSeconds", _NON_NEGATIVE, 120)),
            max_restarts=int(self.sub("restart", "maxRestarts", _COUNT, 3 if kind == "train" else 0)),
            backoff_seconds=float(self.sub("restart", "backoffSeconds", _NON_NEGATIVE, 5)),
            progress_pattern=self.sub("progress", "pattern", REGEX, None),
            checkpoint_pattern=self.sub("checkpoint", "pattern", REGEX, None),
            checkpoint_history=self.sub("checkpoint", "history", _POSITIVE_INT, 8),
            span=self.loader.span(self.pointer),
            **self.probe_fields(),
            **self.cluster_fields(),
        )
        self.check_job(job, env)
        return job if command else None

    def probe_fields(self) -> dict[str, Any]:
        """The job's ``probe`` object (contract 6.3)."""
        args = self.sub("probe", "args", STRING_LIST, None)
        return {
            "probe_args": tuple(args) if args is not None else None,
            "probe_max_vram_mb": self.sub("probe", "maxVramMb", _POSITIVE_INT, 5120),
            "probe_required": self.sub("probe", "required", BOOLEAN, False),
        }

    def cluster_fields(self) -> dict[str, Any]:
        """``runOn`` and ``resources`` (contract 6.2); AR112 when ``runOn`` names no cluster."""
        run_on = self.get("runOn", STRING, None)
        if run_on is not None and run_on not in self.loader.clusters:
            known = ", ".join(sorted(self.loader.clusters)) or "none"
            message = f"`runOn` names no cluster of this manifest: {run_on[:60]!r} (known: {known})"
            self.report("AR112", message, "runOn")
        gpus = self.sub("resources", "gpus", _NON_NEGATIVE, None)
        cpus = self.sub("resources", "cpus", _NON_NEGATIVE, None)
        memory = self.sub("resources", "memoryMb", _COUNT, None)
        resources = Resources(
            gpus=float(gpus) if gpus is not None else None,
            cpus=float(cpus) if cpus is not None else None,
            memory_mb=int(memory) if memory is not None else None,
        )
        return {"run_on": run_on, "resources": resources}

    def check_job(self, job: Job, env: dict[str, str]) -> None:
        if "PYTHONPATH" in env:
            message = "`env` sets PYTHONPATH: the trainer's imports then depend on this manifest"
            self.report("AR105", message, "env/PYTHONPATH", "warning")
        for name in env:
            if name.upper() in LOADER_VARIABLES:
                message = (
                    f"`env` overrides {name}: it decides which programs and libraries the job "
                    "loads, so this manifest can run code from outside the workspace"
                )
                self.report("AR113", message, f"env/{escape_pointer(name)}", "warning")
        if job.kind == "train" and not any(_names_checkpoint(arg) for arg in job.resume_args):
            field = "resume/args" if "resume" in self.raw else "id"
            self.report(
                "AR106",
                "a `train` job needs `resume.args` with `{step}` (or the checkpoint's `{path}`) "
                "so a crashed run can be relaunched from its last checkpoint",
                field,
                data=self.resume_fix(),
            )
        if job.run_on is not None and job.stop_method == "file":
            stop = self.raw.get("stop")
            self.report(
                "AR111",
                "on a cluster there is no stop file: a stop sends the trainer SIGTERM (Ray's stop), "
                'then SIGKILL after `graceSeconds`; use `"method": "signal"` and handle SIGTERM',
                "stop/method" if isinstance(stop, dict) and "method" in stop else "runOn",
                "warning",
            )
        if job.status == "approval-required":
            self.report(
                "AR109",
                f"`{job.id}` needs approval before each start",
                "status" if "status" in self.raw else "id",
                "information",
            )
        self.check_seed_shape(job)
        self.check_command(job)
        self.check_paths(job)

    def check_seed_shape(self, job: Job) -> None:
        """AR114: a resumable trainer written as a task (the seed's entry) loses every gate."""
        if job.kind != "task" or not resume_shaped(job.args):
            return
        message = (
            f"`{job.id}` runs a Python trainer with resume arguments but loads as a task: no trainer "
            "gates, no pre-flight, no watchdog, and `<step>` is passed as it is; make it a `train` "
            "job with the resume arguments in `resume.args` (quick fix)"
        )
        field = "kind" if "kind" in self.raw else "args"
        self.report("AR114", message, field, "warning", data=self.train_job_fix())

    def train_job_fix(self) -> dict[str, Any]:
        """Replace the whole job object with its ``train`` form (``seed.as_train_job``)."""
        span = self.loader.span(self.pointer)
        lines = self.loader.text.splitlines()
        line_text = lines[span.line] if span.line < len(lines) else ""
        indent = line_text[: len(line_text) - len(line_text.lstrip())]
        text = job_text(as_train_job(self.raw), indent)
        return {
            "fix": {
                "title": "Make it a train job (resume arguments into resume.args)",
                "edits": [edit_at(span, text)],
            }
        }

    def check_command(self, job: Job) -> None:
        """AR110 for a ``command`` that is a path to an executable outside the workspace and the roots.

        A bare name is looked up on PATH at launch, as the user's shell would
        (allowed); so is a path into a folder of PATH, or the server's own
        interpreter's folder (the ``{python}`` default).
        """
        command = job.command
        if not command or command == PYTHON_PLACEHOLDER or not _names_a_path(command):
            return
        target = Path(
            os.path.normpath(
                Path(command) if os.path.isabs(command) else job.resolved_cwd(self.loader.root) / command
            )
        )
        if self.loader.inside(target) or _on_trusted_folder(target):
            return
        self.report(
            "AR110", f"`command` {command[:100]!r} is outside the workspace and its `roots`", "command"
        )

    def replace_fix(self, field: str, new_text: str, title: str) -> dict[str, Any]:
        """A quick fix replacing a field's value (carried in the diagnostic's data)."""
        span = self.loader.span(f"{self.pointer}/{field}")
        return {"fix": {"title": title, "edits": [edit_at(span, new_text)]}}

    def resume_fix(self) -> dict[str, Any]:
        """Add (or complete) ``resume.args`` with the contract's flags."""
        standard = '["--resume", "--start-step", "{step}"]'
        title = "Add resume.args: --resume --start-step {step}"
        if isinstance(self.raw.get("resume"), dict) and "args" in self.raw["resume"]:
            return self.replace_fix("resume/args", standard, title)
        if "resume" in self.raw:
            return self.replace_fix("resume", '{"args": ' + standard + "}", title)
        span = self.loader.span(f"{self.pointer}/id")
        line_text = self.loader.text.splitlines()[span.line] if self.loader.text else ""
        indent = line_text[: len(line_text) - len(line_text.lstrip())]
        insert = Span(span.end_line, span.end_col, span.end_line, span.end_col)
        new_text = f',\n{indent}"resume": {{"args": {standard}}}'
        return {"fix": {"title": title, "edits": [edit_at(insert, new_text)]}}

    def check_paths(self, job: Job) -> None:
        root = self.loader.root
        cwd = self.loader.resolve(root / job.cwd)  # ``job.resolved_cwd``, once per load
        if not self.loader.inside(cwd):
            self.report("AR110", f"`cwd` {job.cwd!r} leaves the workspace (and its `roots`)", "cwd")
            return
        self.check_arguments(job)
        if not cwd.is_dir():
            self.report("AR107", f"`cwd` {job.cwd!r} does not exist", "cwd")
            return
        if job.script is None:
            return
        script = self.loader.resolve(cwd / job.script)  # ``job.resolved_script``, once per load
        field = "script" if "script" in self.raw else "args"
        named = (
            f"`script` {job.script!r}" if field == "script" else f"the trainer {job.script!r} (from `args`)"
        )
        if not self.loader.inside(script):
            self.report("AR110", f"{named} leaves the workspace (and its `roots`)", field)
        elif not script.is_file():
            self.report("AR107", f"{named} does not exist", field)

    def check_arguments(self, job: Job) -> None:
        """AR110 for each argument that names an existing path outside the workspace."""
        root = self.loader.root
        cwd = self.loader.resolve(root / job.cwd)
        for index, arg in enumerate(job.args):
            target = _existing_path(cwd, arg, self.loader.resolve)
            if target is not None and not self.loader.inside(target):
                self.report(
                    "AR110",
                    f"argument {arg[:100]!r} names {target}, outside the workspace and its `roots`",
                    f"args/{index}",
                )


LOADER_VARIABLES = frozenset({"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHOME"})
"""Variables that choose what code runs (AR113)."""


def _existing_path(cwd: Path, arg: str, resolve: Callable[[Path], Path] = Path.resolve) -> Path | None:
    """The real path ``arg`` names when it is an existing file or folder, else None."""
    if not arg or arg.startswith("-") or "\0" in arg or len(arg) > 4096:
        return None
    candidate = Path(arg) if os.path.isabs(arg) else cwd / arg
    try:
        if not candidate.exists():
            return None
        return resolve(candidate)
    except (OSError, ValueError):
        return None


def _names_a_path(command: str) -> bool:
    """True for a command written as a path (``./x``, ``/usr/bin/x``, ``E:\\Python310\\python.exe``)."""
    return os.path.isabs(command) or "/" in command or "\\" in command


def _on_trusted_folder(target: Path) -> bool:
    """True when the executable lies in a folder of PATH or in the server interpreter's folder."""
    folders = [
        Path(sys.executable).parent,
        *(Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p),
    ]
    try:
        parent = target.resolve().parent
    except (OSError, ValueError, RuntimeError):
        return False
    for folder in folders:
        try:
            if folder.resolve() == parent or folder == target.parent:
                return True
        except (OSError, ValueError, RuntimeError):
            continue
    return False


def _names_checkpoint(arg: str) -> bool:
    """An argument that tells the trainer which checkpoint to resume from: its step or its path."""
    return STEP in arg or SEED_STEP in arg or RESUME_PATH_PLACEHOLDER in arg
