"""Load ``training/manifest.json`` into jobs, with diagnostics at exact positions.

The text is parsed twice: by :mod:`json` (its error position is AR101's) and
by ``positions.py`` (``json_source_map``'s answer, faster) for the position of
every value, so each AR102-AR110 diagnostic sits on the offending value. A manifest that is not JSON, or whose
top level is not usable, is *fatal* (no job loads); a job with an error is
left out of the runnable jobs while the others load.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import attrs

from arena_ls.diagnostics import Diag, Span
from arena_ls.manifest import positions
from arena_ls.manifest.document import ManifestDocument, edit_at, escape_pointer, inside_folder
from arena_ls.manifest.job_reader import JobReader
from arena_ls.manifest.model import ClusterDecl, Job
from arena_ls.manifest.seed import (
    job_text,
    stage_entries,
    stage_job,
)
from arena_ls.validation import (
    STRING_LIST,
    Invalid,
    shown,
    unknown_fields,
)

KNOWN_TOP = {"version", "jobs", "clusters", "roots", "stages", "approval"}
APPROVAL_RULES = ("by-job", "always")
KNOWN_CLUSTER = {"kind", "address"}
CLUSTER_KINDS = ("ray",)


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
    return None if inside_folder(target, root) else target


class _Loader(ManifestDocument):
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
            self.positions = positions.calculate(self.text)  # json_source_map's answer, faster
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
                "AR102",
                f"unknown top-level key `{key}` (ignored)",
                f"/{escape_pointer(key)}",
                "warning",
                key=True,
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
        return {"fix": {"title": title, "edits": [edit_at(at, text)]}}

    def load_clusters(self, raw: Any) -> dict[str, ClusterDecl]:
        """The top-level ``clusters`` object: ``{NAME: {"kind": "ray", "address": ...}}``."""
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.report("AR102", "`clusters` must be an object of named clusters", "/clusters")
            return {}
        clusters: dict[str, ClusterDecl] = {}
        for name, block in raw.items():
            pointer = f"/clusters/{escape_pointer(name)}"
            if not isinstance(block, dict):
                self.report("AR102", f"cluster `{name}` must be an object", pointer)
                continue
            for key in unknown_fields(block, KNOWN_CLUSTER):
                message = f"unknown field `clusters.{name}.{key}` (ignored)"
                self.report("AR102", message, f"{pointer}/{escape_pointer(key)}", "warning", key=True)
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
            job = JobReader(self, raw, pointer).read()
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
