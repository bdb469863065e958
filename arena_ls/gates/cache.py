"""Gate results for a job's trainer script, shared by start, status, lenses and diagnostics.

No LSP here: the server's workspace holds one ``TrainerGates`` and hands its
``errors`` to the supervisor (the gates a start must pass) and its
``lint_file`` to the diagnostics feature (an open buffer's text).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from arena_ls.diagnostics import Diag, Severity, Span
from arena_ls.gates import lint_trainer
from arena_ls.gates.budget import GateBudget
from arena_ls.gates.model import Finding
from arena_ls.gates.severity import with_severities
from arena_ls.lifecycle.gate_verdict import GateVerdict
from arena_ls.manifest import Job, ManifestResult
from arena_ls.trainer_facts.job_args import JobArgs, trainer_arguments

CACHE_LIMIT = 1024
"""Lint results kept (least recently used first out): a manifest of 500 jobs may name hundreds
of trainers, each kept once per content."""

PROFILE_WAIT_S = 30.0
"""How long a lint waits for the device profile (the GPUs' first reading) before it judges with
what is known: NVML starts in well under a second, even where a driver answers slowly."""

Signature = tuple[int, int, int]
"""(size, mtime_ns, inode) of a trainer file: when it changes, the file is read and hashed again."""
Chosen = tuple[tuple[str, Severity], ...]
"""The tunable gates' severities (``gates.severity``, AR010 on Windows), sorted."""
LintKey = tuple[str, str, bool | None, tuple[str, ...], Chosen, tuple[JobArgs, ...]]
"""(path, SHA-256 of the text, device profile, checkpoint patterns, severities, the arguments of the
jobs that run it): what a lint depends on."""


class TrainerGates:
    """The gates of a workspace's trainers, linted once per content and device profile.

    Shared by status (``JobInfo.blockedBy``), lenses, starts and the
    diagnostics pass; safe to call from worker threads, where every lint
    that is not cached yet runs (``warm``), never on the event loop's behalf.
    """

    def __init__(
        self,
        root: Path,
        manifest: Callable[[], ManifestResult],
        fp32_only: Callable[[], bool | None],
        severities: Callable[[], Mapping[str, Severity]] | None = None,
        budget: GateBudget | None = None,
        profile_known: Callable[[float | None], bool] | None = None,
        read_profile_now: Callable[[], None] | None = None,
    ) -> None:
        self.root = root
        self.profile_known = profile_known or (lambda timeout_s: True)
        """Whether the device profile is known (``fp32_only`` is read from the GPUs, which a new
        server reads on a thread), waiting up to the seconds given: a trainer is not linted before
        it is (its verdict would be judged for the wrong device), and is pending until then."""
        self.read_profile_now = read_profile_now or (lambda: None)
        """Have the GPUs read now if they were not yet: called where a person waits for the answer
        (a start's verdict, an open editor's lint); the verdicts judged ahead of time wait for the
        server's own first reading, after its first status (``protocol/warmup.py``)."""
        self.budget = budget
        """The worker process each lint runs in, within a time and memory budget (the server's);
        None: in this process (``arena check``, unit tests)."""
        self.manifest = manifest
        """The workspace's manifest as it is now (for each job's ``checkpoint.pattern``: AR014)."""
        self.fp32_only = fp32_only
        """The device profile as it is now (AR011)."""
        self.severities = severities or dict
        """The tunable gates' severities as they are now (``gates.severity``, AR010 on Windows)."""
        self._lock = threading.Lock()
        self._results: OrderedDict[LintKey, list[Diag]] = OrderedDict()
        self._digests: dict[str, tuple[Signature, str]] = {}
        """Each trainer file's last signature and the hash of its text then."""
        self._patterns: tuple[ManifestResult, dict[str, tuple[str, ...]]] | None = None
        """The checkpoint patterns by trainer, computed once per parsed manifest."""
        self._job_args: tuple[ManifestResult, dict[str, tuple[JobArgs, ...]]] | None = None
        """The arguments of the jobs by trainer, computed once per parsed manifest."""
        self._trainers: tuple[ManifestResult, dict[str, Job]] | None = None
        self.lints = 0
        """How many lints ran (tests and benchmarks read it)."""
        self.rewrites_seen = 0
        """How many times a start found a trainer rewritten behind an unchanged signature (part of
        ``signature``: what status answered from the old verdict is answered again)."""

    def errors(self, job: Job) -> list[Diag]:
        """Error-severity gate diagnostics of the job's trainer file (empty when it passes), as
        judged for this job (a cadence its arguments set: ``Diag.jobs``)."""
        if job.kind != "train":
            return []
        script = job.resolved_script(self.root)
        if script is None:
            return []
        return [d for d in self.lint_file(str(script)) if d.is_error and d.holds_for(job.id)]

    def verdict(self, job: Job) -> GateVerdict:
        """The gates' verdict on the trainer's bytes as they are now, for a start (issue 39).

        The file is read and hashed here, once per start, whatever its signature says (a rewrite
        in place with its mtime put back keeps size, mtime and inode): the lint is still cached by
        that hash, and the hash goes to the exec-time check, which compares the file with it right
        before the exec. What status and the lenses read stays keyed by the signature (cheap).
        """
        script = job.resolved_script(self.root) if job.kind == "train" else None
        if script is None:
            return GateVerdict([])
        self.read_profile_now()
        self.profile_known(PROFILE_WAIT_S)
        path = str(script)
        signature = _signature(path)
        source = _read(path)
        if signature is None or source is None:
            return GateVerdict([])  # gone or unreadable: the exec-time check says so at the exec
        digest = _digest(source)
        with self._lock:
            known = self._digests.get(path)
            self._digests[path] = (signature, digest)
        changed = known is not None and known[0] == signature and known[1] != digest
        if changed:
            self.rewrites_seen += 1
        diags = self._lint_text(path, digest, source)
        errors = [d for d in diags if d.is_error and d.holds_for(job.id)]
        return GateVerdict(errors, path, digest, changed)

    def known_errors(self, job: Job) -> list[Diag] | None:
        """``errors`` when the trainer's current content is linted already, else None (nothing is
        linted here: status answers at once while a lint runs, ``JobInfos``)."""
        script = job.resolved_script(self.root) if job.kind == "train" else None
        if script is None:
            return []
        if not self._linted(str(script)):
            return None
        return self.errors(job)

    def pending(self, manifest: ManifestResult) -> frozenset[str]:
        """The trainers of ``manifest`` whose current content is not linted yet."""
        return frozenset(path for path in self.trainers(manifest) if not self._linted(path))

    def trainers(self, manifest: ManifestResult) -> dict[str, Job]:
        """One ``train`` job per trainer file of ``manifest`` (computed once per parsed manifest)."""
        known = self._trainers
        if known is not None and known[0] is manifest:
            return known[1]
        found: dict[str, Job] = {}
        for job in manifest.jobs.values():
            script = job.resolved_script(self.root) if job.kind == "train" else None
            if script is not None:
                found.setdefault(str(script), job)
        self._trainers = (manifest, found)
        return found

    def signature(self, manifest: ManifestResult) -> tuple[object, ...]:
        """What the gates of ``manifest``'s jobs depend on now: the device profile, the chosen
        severities and each trainer file's signature (one ``stat`` per distinct trainer, however
        many jobs share it)."""
        return (
            self.fp32_only(),
            self._chosen(),
            self.rewrites_seen,
            *((path, _signature(path)) for path in self.trainers(manifest)),
        )

    def missing(self, manifest: ManifestResult) -> list[Job]:
        """A job per trainer of ``manifest`` whose current content is not linted yet."""
        return [job for path, job in self.trainers(manifest).items() if not self._linted(path)]

    def _linted(self, path: str) -> bool:
        signature = _signature(path)
        if signature is None:
            return True  # nothing to lint: errors() answers [] at once
        if not self.profile_known(0.0):
            return False
        with self._lock:
            known = self._digests.get(path)
            if known is None or known[0] != signature:
                return False
            return (
                path,
                known[1],
                self.fp32_only(),
                self.checkpoint_patterns(path),
                self._chosen(),
                self.job_args(path),
            ) in self._results

    def warm(self, jobs: list[Job]) -> None:
        """Lint every trainer of ``jobs`` not linted yet in its current content (a worker thread's job)."""
        self.profile_known(PROFILE_WAIT_S)
        for job in jobs:
            self.errors(job)

    def lint_file(self, path: str, text: str | None = None) -> list[Diag]:
        """Every gate diagnostic of a trainer file (the open buffer's text when given), cached by
        the text's hash: the same content is linted once, whoever asks."""
        source: str | bytes | None
        if text is not None:  # an editor's open buffer: a person waits for its diagnostics
            self.read_profile_now()
        self.profile_known(PROFILE_WAIT_S)
        if text is None:
            digest, source = self._file_digest(path)
            if digest is None:
                return []
        else:
            digest, source = _digest(text.encode("utf-8", "surrogatepass")), text
        return self._lint_text(path, digest, source)

    def _lint_text(self, path: str, digest: str, source: str | bytes | None) -> list[Diag]:
        """The diagnostics of ``path`` whose text hashes to ``digest`` (``source``, or read when None)."""
        key = (
            path,
            digest,
            self.fp32_only(),
            self.checkpoint_patterns(path),
            self._chosen(),
            self.job_args(path),
        )
        with self._lock:
            found = self._results.get(key)
            if found is not None:
                self._results.move_to_end(key)
                return list(found)
        if source is None:
            source = _read(path)
            if source is None:
                return []
            if _digest(source) != digest:  # rewritten since it was hashed: judge what is there now
                return self._lint_text(path, _digest(source), source)
        diags = self._lint(path, source, key)
        with self._lock:
            self.lints += 1
            self._results[key] = diags
            while len(self._results) > CACHE_LIMIT:
                self._results.popitem(last=False)
        return list(diags)

    def _file_digest(self, path: str) -> tuple[str | None, bytes | None]:
        """The hash of a trainer file's text (read again only when its signature changed)."""
        signature = _signature(path)
        if signature is None:
            return None, None
        with self._lock:
            known = self._digests.get(path)
        if known is not None and known[0] == signature:
            return known[1], None
        source = _read(path)
        if source is None:
            return None, None
        digest = _digest(source)
        with self._lock:
            self._digests[path] = (signature, digest)
            while len(self._digests) > CACHE_LIMIT:
                del self._digests[next(iter(self._digests))]
        return digest, source

    def _lint(self, path: str, source: str | bytes, key: LintKey) -> list[Diag]:
        if self.budget is not None:
            findings = self.budget.lint(source, key[2], key[3], key[5])
        else:
            findings = lint_trainer(source, fp32_only=key[2], checkpoint_patterns=key[3], jobs=key[5])
        return with_severities(
            (
                Diag(
                    code=f.code,
                    message=f.message,
                    severity=f.severity,
                    span=Span(f.line, f.col, f.end_line, f.end_col),
                    path=path,
                    data=_fix_data(f),
                    jobs=f.jobs,
                )
                for f in findings
            ),
            dict(key[4]),
        )

    def _chosen(self) -> Chosen:
        return tuple(sorted(self.severities().items()))

    def checkpoint_patterns(self, path: str) -> tuple[str, ...]:
        """The ``checkpoint.pattern`` of every job whose script is ``path`` (for AR014)."""
        try:
            return self._patterns_by_script().get(os.path.realpath(path), ())
        except (OSError, ValueError):
            return ()

    def _patterns_by_script(self) -> dict[str, tuple[str, ...]]:
        """Once per parsed manifest (the manifest cache hands out one object per content)."""
        manifest = self.manifest()
        known = self._patterns
        if known is not None and known[0] is manifest:
            return known[1]
        found: dict[str, set[str]] = {}
        for job in manifest.jobs.values():
            script = job.resolved_script(self.root)
            if job.checkpoint_pattern and script is not None:
                try:
                    found.setdefault(os.path.realpath(script), set()).add(job.checkpoint_pattern)
                except (OSError, ValueError):
                    continue
        patterns = {path: tuple(sorted(values)) for path, values in found.items()}
        self._patterns = (manifest, patterns)
        return patterns

    def job_args(self, path: str) -> tuple[JobArgs, ...]:
        """The arguments of every ``train`` job whose script is ``path``, by job id (the cadence
        rules judge each job with the values its arguments set)."""
        try:
            return self._job_args_by_script().get(os.path.realpath(path), ())
        except (OSError, ValueError):
            return ()

    def _job_args_by_script(self) -> dict[str, tuple[JobArgs, ...]]:
        manifest = self.manifest()
        known = self._job_args
        if known is not None and known[0] is manifest:
            return known[1]
        found: dict[str, list[JobArgs]] = {}
        for job in sorted(manifest.jobs.values(), key=lambda item: item.id):
            script = job.resolved_script(self.root) if job.kind == "train" else None
            if script is None:
                continue
            try:
                where = os.path.realpath(script)
            except (OSError, ValueError):
                continue
            found.setdefault(where, []).append(JobArgs(job.id, trainer_arguments(job.args, job.script)))
        by_script = {path: tuple(jobs) for path, jobs in found.items()}
        self._job_args = (manifest, by_script)
        return by_script


def _signature(path: str) -> Signature | None:
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return None
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (OSError, ValueError):
        return None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fix_data(finding: Finding) -> dict[str, Any] | None:
    """The finding's quick fix, carried in the diagnostic for code actions."""
    if not finding.edits or not finding.fix_title:
        return None
    edits = [
        {"range": Span(e.line, e.col, e.end_line, e.end_col).to_wire(), "newText": e.new_text}
        for e in finding.edits
    ]
    return {"fix": {"title": finding.fix_title, "edits": edits}}
