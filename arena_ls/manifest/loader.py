"""Load ``training/manifest.json`` into jobs, with diagnostics at exact positions.

The text is parsed twice: by :mod:`json` (its error position is AR101's) and
by ``json_source_map`` for the position of every value, so each AR102-AR110
diagnostic sits on the offending value. A manifest that is not JSON, or whose
top level is not usable, is *fatal* (no job loads); a job with an error is
left out of the runnable jobs while the others load.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import attrs
import json_source_map

from arena_ls.diagnostics import Diag, Severity, Span
from arena_ls.manifest.model import PYTHON_PLACEHOLDER, RESUME_PATH_PLACEHOLDER, ClusterDecl, Job, Resources
from arena_ls.manifest.seed import (
    SEED_STEP,
    STEP,
    as_train_job,
    job_text,
    resume_shaped,
    stage_entries,
    stage_job,
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

KNOWN_TOP = {"version", "jobs", "clusters", "roots", "stages", "approval"}
APPROVAL_RULES = ("by-job", "always")
KNOWN_CLUSTER = {"kind", "address"}
CLUSTER_KINDS = ("ray",)
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


@attrs.frozen
class Stage:
    """A top-level ``stages`` entry: listed as a job that cannot run (it has no command)."""

    id: str
    name: str
    diagnostic: Diag
    """Its AR115 (information, with the quick fix that turns it into a job)."""


@attrs.frozen
class ManifestResult:
    """What loading a manifest gave."""

    path: Path
    jobs: dict[str, Job]
    """Jobs that loaded without an error, by id."""
    all_ids: tuple[str, ...]
    diagnostics: tuple[Diag, ...]
    job_diagnostics: dict[str, tuple[Diag, ...]]
    """Each job's own diagnostics (errors make it not runnable)."""
    fatal: bool
    """True when the manifest does not load at all."""
    entry_lines: tuple[tuple[str, int], ...] = ()
    """``(id, line)`` of each job object that has a string id, in file order (a duplicate id
    appears once per entry): where an editor shows that entry's code lens."""
    clusters: dict[str, ClusterDecl] = attrs.field(factory=dict)
    """The manifest's ``clusters`` (contract 6.2), by name."""
    roots: tuple[Path, ...] = ()
    """The manifest's ``roots`` (contract 7.3), absolute and resolved: outside folders a job may use."""
    stages: tuple[Stage, ...] = ()
    """The manifest's ``stages`` (contract 7.3) that no job of the same id replaces, in file order."""
    approval: str = "by-job"
    """``approval`` (contract 7.3): ``always`` makes every start need ``approved: true``."""

    @property
    def allowed_roots(self) -> tuple[Path, ...]:
        """The workspace, then the roots: the folders a job may take paths from (``allowedRoots``)."""
        return (self.path_root, *self.roots)

    path_root: Path = Path()
    """The workspace root the manifest was loaded for (resolved)."""

    @property
    def errors(self) -> list[Diag]:
        return [d for d in self.diagnostics if d.is_error]


def load_manifest(path: Path, root: Path, *, state_dir: Path | None = None) -> ManifestResult:
    """Load the manifest file; a missing or unreadable file is one AR101 diagnostic."""
    escape = _manifest_link(path, root)
    if escape is not None:
        diag = Diag("AR110", escape, "error", Span(0, 0, 0, 0), path=str(path))
        return ManifestResult(path, {}, (), (diag,), {}, True)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        diag = Diag("AR101", unreadable_words(path, error), "error", Span(0, 0, 0, 0), str(path))
        return ManifestResult(path, {}, (), (diag,), {}, True)
    return load_manifest_text(text, path, root, state_dir=state_dir)


def unreadable_words(path: Path, error: OSError) -> str:
    """Why there is no manifest text: a file that is not there is not a JSON error."""
    if isinstance(error, FileNotFoundError):
        return f"there is no manifest: {path} does not exist"
    if isinstance(error, IsADirectoryError):
        return f"there is no manifest: {path} is a folder"
    return f"cannot read the manifest {path}: {error.strerror or error}"


def load_manifest_text(text: str, path: Path, root: Path, *, state_dir: Path | None = None) -> ManifestResult:
    """Load manifest text (an editor buffer, possibly half typed).

    ``state_dir``, when given, is checked too: a state folder that is a
    link leaving the workspace makes the manifest fatal (nothing starts).
    """
    result = _Loader(text, path, root.resolve()).load()
    escapes = [_manifest_link(path, root)]
    if state_dir is not None:
        target = link_leaving(state_dir, root)
        if target is not None:
            escapes.append(
                f"the state folder {state_dir} is a link to {target}, outside the workspace: "
                "no run starts until it is a folder of the workspace"
            )
    diags = [
        Diag("AR110", message, "error", Span(0, 0, 0, 0), path=str(path)) for message in escapes if message
    ]
    if not diags:
        return result
    return attrs.evolve(result, jobs={}, diagnostics=(*result.diagnostics, *diags), fatal=True)


def _manifest_link(path: Path, root: Path) -> str | None:
    target = link_leaving(path, root)
    if target is None:
        return None
    return f"the manifest {path} is a link to {target}, outside the workspace: its jobs do not run"


def link_leaving(path: Path, root: Path) -> Path | None:
    """Where ``path`` really is, when it lies in the workspace by name but a link takes it outside.

    A path the user configured outside the workspace (an absolute setting)
    is the user's choice and is not reported; only a link is.
    """
    root = root.resolve()
    candidate = path if path.is_absolute() else root / path
    try:
        Path(os.path.normpath(candidate)).relative_to(root)
    except ValueError:
        return None
    target = candidate.resolve()
    return None if _inside(target, root) else target


class _Loader:
    def __init__(self, text: str, path: Path, root: Path) -> None:
        self.text = text
        self.path = path
        self.root = root
        self.positions: dict[str, Any] = {}
        self.diags: list[Diag] = []
        self.per_job: dict[str, list[Diag]] = {}
        self.current: list[Diag] | None = None
        self.clusters: dict[str, ClusterDecl] = {}
        self.roots: tuple[Path, ...] = ()
        self.approval = "by-job"

    def inside(self, path: Path) -> bool:
        """True when ``path`` lies in the workspace or one of the manifest's ``roots``."""
        return any(_inside(path, folder) for folder in (self.root, *self.roots))

    # -- reporting -------------------------------------------------------------------

    def span(self, pointer: str, *, key: bool = False) -> Span:
        entry = self.positions.get(pointer)
        while entry is None and pointer:
            pointer = pointer.rsplit("/", 1)[0]
            entry = self.positions.get(pointer)
        if entry is None:
            return Span(0, 0, 0, 0)
        if key and entry.key_start is not None:
            start, end = entry.key_start, entry.key_end
        else:
            start, end = entry.value_start, entry.value_end
        return Span(start.line, start.column, end.line, end.column)

    def report(
        self,
        code: str,
        message: str,
        pointer: str,
        severity: Severity = "error",
        key: bool = False,
        data: Any = None,
    ) -> None:
        diag = Diag(code, message, severity, self.span(pointer, key=key), path=str(self.path), data=data)
        self.diags.append(diag)
        if self.current is not None:
            self.current.append(diag)

    def fatal(self, diag: Diag) -> ManifestResult:
        self.diags.append(diag)
        return ManifestResult(self.path, {}, (), tuple(self.diags), {}, True)

    # -- loading ---------------------------------------------------------------------

    def load(self) -> ManifestResult:
        try:
            document = json.loads(self.text)
        except json.JSONDecodeError as error:
            line, col = error.lineno - 1, error.colno - 1
            message = f"not valid JSON: {error.msg}"
            return self.fatal(Diag("AR101", message, "error", Span(line, col, line, col + 1), str(self.path)))
        except RecursionError:
            return self.fatal(Diag("AR101", "not valid JSON: nested too deeply", "error", Span(0, 0, 0, 0)))
        try:
            self.positions = json_source_map.calculate(self.text)
        except Exception:  # the positions are a nicety; never fail a load on them
            self.positions = {}
        return self.load_document(document)

    def load_document(self, document: Any) -> ManifestResult:
        if not isinstance(document, dict):
            self.report("AR102", "the manifest must be a JSON object", "")
            return ManifestResult(self.path, {}, (), tuple(self.diags), {}, True)
        version = document.get("version")
        if version != 1 or isinstance(version, bool):
            where = "/version" if "version" in document else ""
            self.report("AR102", f"`version` must be 1 (found {version!r})", where)
        for key in unknown_fields(document, KNOWN_TOP):
            self.report(
                "AR102", f"unknown top-level key `{key}` (ignored)", f"/{_escape(key)}", "warning", key=True
            )
        self.clusters = self.load_clusters(document.get("clusters"))
        self.roots = self.load_roots(document.get("roots"))
        self.approval = self.load_approval(document)
        raw_jobs = document.get("jobs")
        if not isinstance(raw_jobs, list):
            self.report(
                "AR102", "`jobs` must be a list of job objects", "/jobs" if "jobs" in document else ""
            )
            return ManifestResult(self.path, {}, (), tuple(self.diags), {}, True)
        fatal = any(d.is_error for d in self.diags)
        jobs, ids = self.load_jobs(raw_jobs)
        per_job = {job_id: tuple(diags) for job_id, diags in self.per_job.items()}
        if fatal:
            jobs = {}
        entry_lines = tuple(
            (raw["id"], self.span(f"/jobs/{index}").line)
            for index, raw in enumerate(raw_jobs)
            if isinstance(raw, dict) and isinstance(raw.get("id"), str)
        )
        stages = self.load_stages(document.get("stages"), set(ids))
        return ManifestResult(
            self.path,
            jobs,
            tuple(ids),
            tuple(self.diags),
            per_job,
            fatal,
            entry_lines,
            dict(self.clusters),
            roots=self.roots,
            stages=stages,
            approval=self.approval,
            path_root=self.root,
        )

    def load_approval(self, document: dict[str, Any]) -> str:
        """``approval``: ``by-job`` (default, contract 4.2) or ``always`` (the seed daemon's rule)."""
        value = document.get("approval", "by-job")
        if value not in APPROVAL_RULES:
            self.report(
                "AR102", f'`approval` must be "by-job" or "always" (found {shown(value)})', "/approval"
            )
            return "by-job"
        return str(value)

    def load_roots(self, raw: Any) -> tuple[Path, ...]:
        """``roots``: folders outside the workspace a job may use, relative to the workspace root."""
        if raw is None:
            return ()
        try:
            names = STRING_LIST.parse(raw, ("roots",))
        except Invalid as error:
            self.report("AR102", f"{error.message} (found {shown(raw)})", "/roots")
            return ()
        roots: list[Path] = []
        for index, name in enumerate(names):
            if not name or "\0" in name:
                self.report("AR102", "each of `roots` must be a folder's path", f"/roots/{index}")
                continue
            folder = Path(os.path.normpath(Path(name) if os.path.isabs(name) else self.root / name))
            try:
                resolved = folder.resolve()
            except (OSError, ValueError, RuntimeError):
                resolved = folder
            if not resolved.is_dir():
                message = f"root {name[:100]!r} is not a folder here: jobs cannot take paths from it"
                self.report("AR107", message, f"/roots/{index}", "warning")
                continue
            roots.append(resolved)
        return tuple(roots)

    def load_stages(self, raw: Any, job_ids: set[str]) -> tuple[Stage, ...]:
        """``stages`` (the seed's older manifest): each listed, blocked, with AR115 and its quick fix."""
        if raw is None:
            return ()
        if not isinstance(raw, (list, dict)):
            self.report("AR102", "`stages` must be a list or an object of stages", "/stages")
            return ()
        stages: list[Stage] = []
        for stage_id, name, suffix in stage_entries(raw):
            if stage_id in job_ids:
                continue  # a job of that id replaces the stage
            message = (
                f"stage `{stage_id[:64]}` has no command: it is listed but cannot run "
                "until it is a job of `jobs` (quick fix)"
            )
            pointer = f"/stages/{suffix}"
            self.report("AR115", message, pointer, "information", data=self.stage_fix(stage_id, name))
            stages.append(Stage(stage_id, name, self.diags[-1]))
        return tuple(stages)

    def stage_fix(self, stage_id: str, name: str) -> dict[str, Any] | None:
        """Insert a job for the stage at the start of ``jobs``."""
        entry = self.positions.get("/jobs")
        if entry is None:
            return None
        start = entry.value_start
        at = Span(start.line, start.column + 1, start.line, start.column + 1)
        has_jobs = bool(self.positions.get("/jobs/0"))
        text = "\n    " + job_text(stage_job(stage_id, name), "    ") + ("," if has_jobs else "\n  ")
        title = f"Turn stage {stage_id[:64]} into a job"
        return {"fix": {"title": title, "edits": [_edit(at, text)]}}

    def load_clusters(self, raw: Any) -> dict[str, ClusterDecl]:
        """The top-level ``clusters`` object: ``{NAME: {"kind": "ray", "address": ...}}``."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.report("AR102", "`clusters` must be an object of named clusters", "/clusters")
            return {}
        clusters: dict[str, ClusterDecl] = {}
        for name, block in raw.items():
            pointer = f"/clusters/{_escape(name)}"
            if not isinstance(block, dict):
                self.report("AR102", f"cluster `{name}` must be an object", pointer)
                continue
            for key in unknown_fields(block, KNOWN_CLUSTER):
                message = f"unknown field `clusters.{name}.{key}` (ignored)"
                self.report("AR102", message, f"{pointer}/{_escape(key)}", "warning", key=True)
            kind = block.get("kind", "ray")
            if kind not in CLUSTER_KINDS:
                self.report("AR102", f'`clusters.{name}.kind` must be "ray"', f"{pointer}/kind")
                continue
            address = block.get("address")
            if address is not None and not (isinstance(address, str) and address):
                self.report("AR102", f"`clusters.{name}.address` must be a string", f"{pointer}/address")
                address = None
            clusters[name] = ClusterDecl(name=name, kind=kind, address=address)
        return clusters

    def load_jobs(self, raw_jobs: list[Any]) -> tuple[dict[str, Job], list[str]]:
        jobs: dict[str, Job] = {}
        ids: list[str] = []
        seen: dict[str, int] = {}
        for index, raw in enumerate(raw_jobs):
            pointer = f"/jobs/{index}"
            if not isinstance(raw, dict):
                self.current = None
                self.report("AR102", "each job must be an object", pointer)
                continue
            job_id = raw.get("id")
            self.current = self.per_job.setdefault(job_id, []) if isinstance(job_id, str) else []
            if isinstance(job_id, str) and job_id in seen:
                self.report("AR103", f"two jobs share the id `{job_id}`", f"{pointer}/id")
            job = _JobReader(self, raw, pointer).read()
            if isinstance(job_id, str):
                if job_id not in seen:
                    ids.append(job_id)
                seen[job_id] = seen.get(job_id, 0) + 1
            if job is not None and not any(d.is_error for d in self.current):
                jobs[job.id] = job
        self.current = None
        for job_id, count in seen.items():
            if count > 1:
                jobs.pop(job_id, None)
        return jobs, ids


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


_KIND = choice("train", "task")
_STATUS = choice("ready", "approval-required", "disabled")
_STOP_METHOD = choice("file", "signal", "both")
_NON_NEGATIVE = number(minimum=0)
_COUNT = integer(minimum=0)
_POSITIVE_INT = integer(minimum=1)


class _JobReader:
    """Reads one job object, reporting each problem at its value."""

    def __init__(self, loader: _Loader, raw: dict[str, Any], pointer: str) -> None:
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
            self.report("AR102", message, f"{name}/{_escape(key)}", "warning")
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
            self.report("AR102", f"unknown job field `{key}` (ignored)", _escape(key), "warning")
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
                self.report("AR113", message, f"env/{_escape(name)}", "warning")
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
                "edits": [_edit(span, text)],
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
        return {"fix": {"title": title, "edits": [_edit(span, new_text)]}}

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
        return {"fix": {"title": title, "edits": [_edit(insert, new_text)]}}

    def check_paths(self, job: Job) -> None:
        root = self.loader.root
        cwd = job.resolved_cwd(root)
        if not self.loader.inside(cwd):
            self.report("AR110", f"`cwd` {job.cwd!r} leaves the workspace (and its `roots`)", "cwd")
            return
        self.check_arguments(job)
        if not cwd.is_dir():
            self.report("AR107", f"`cwd` {job.cwd!r} does not exist", "cwd")
            return
        script = job.resolved_script(root)
        if script is None:
            return
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
        cwd = job.resolved_cwd(root)
        for index, arg in enumerate(job.args):
            target = _existing_path(cwd, arg)
            if target is not None and not self.loader.inside(target):
                self.report(
                    "AR110",
                    f"argument {arg[:100]!r} names {target}, outside the workspace and its `roots`",
                    f"args/{index}",
                )


def _edit(span: Span, new_text: str) -> dict[str, Any]:
    return {"range": span.to_wire(), "newText": new_text}


LOADER_VARIABLES = frozenset({"PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHOME"})
"""Variables that choose what code runs (AR113)."""


def _existing_path(cwd: Path, arg: str) -> Path | None:
    """The real path ``arg`` names when it is an existing file or folder, else None."""
    if not arg or arg.startswith("-") or "\0" in arg or len(arg) > 4096:
        return None
    candidate = Path(arg) if os.path.isabs(arg) else cwd / arg
    try:
        if not candidate.exists():
            return None
        return candidate.resolve()
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


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except ValueError:
        return False
    return True


def _names_checkpoint(arg: str) -> bool:
    """An argument that tells the trainer which checkpoint to resume from: its step or its path."""
    return STEP in arg or SEED_STEP in arg or RESUME_PATH_PLACEHOLDER in arg
