"""Gate and manifest diagnostics, published from one place.

Published on open, change (debounced per document) and save, for every
job's ``script``, any ``train.py`` and the manifest. A change to a trainer
re-publishes the manifest too, since its AR108 summarises the trainer's
gate errors. Open buffers win over the files on disk.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lsprotocol import types

from arena_ls.diagnostics import Diag, Related, Span
from arena_ls.manifest import ManifestResult
from arena_ls.protocol.feature import LanguageFeature
from arena_ls.protocol.livediag import CODE as LIVE_CODE
from arena_ls.protocol.livediag import live_run_diagnostics
from arena_ls.protocol.server import ArenaServer
from arena_ls.protocol.workspace import Workspace
from arena_ls.settings import Settings
from arena_ls.uris import path_to_uri, uri_to_path

log = logging.getLogger(__name__)

DEBOUNCE_SECONDS = 0.3
LINT_THREADS = 2
"""Diagnostics passes at once (the gates' worker lints one file at a time anyway)."""
SOURCE = "arena"

_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "information": types.DiagnosticSeverity.Information,
    "hint": types.DiagnosticSeverity.Hint,
}


def to_lsp(diag: Diag) -> types.Diagnostic:
    """Our diagnostic as LSP's: code, source, link to the rule's docs, fix in ``data``."""
    related = [
        types.DiagnosticRelatedInformation(
            location=types.Location(uri=path_to_uri(r.path), range=_range(r.span)), message=r.message
        )
        for r in diag.related
    ]
    return types.Diagnostic(
        range=_range(diag.span),
        message=diag.message,
        severity=_SEVERITY[diag.severity],
        code=diag.code,
        source=SOURCE,
        code_description=types.CodeDescription(href=_rule_doc_url(diag.code)),
        related_information=related or None,
        data=diag.data,
    )


def _range(span: Span) -> types.Range:
    return types.Range(
        start=types.Position(line=span.line, character=span.col),
        end=types.Position(line=span.end_line, character=span.end_col),
    )


def _rule_doc_url(code: str) -> str:
    from arena_ls.gates import DOCS_URL, rule_doc_url  # start-up speed: the gates load on first use

    if code == LIVE_CODE:
        return DOCS_URL.replace("rules.md", "insights.md") + "#ar013-edited-during-run"
    return rule_doc_url(code)


class DiagnosticsFeature(LanguageFeature):
    """Keeps the published diagnostics of trainers and the manifest current."""

    def __init__(self, server: ArenaServer) -> None:
        self.server = server
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.published: set[str] = set()
        self.sequence = 0
        """Counts the passes begun; ``sent_sequence`` keeps, per document, the pass it last sent."""
        self.sent_sequence: dict[str, int] = {}
        self.session = 0
        """Counts the clients that left: a pass of an earlier session sends nothing."""
        self._lints = ThreadPoolExecutor(max_workers=LINT_THREADS, thread_name_prefix="diagnostics")
        """The passes' own threads: a pass waits for the gates' worker (one lint at a time, seconds
        for a hostile trainer, issue 39), and fifteen such passes must not take every thread of the
        event loop's default executor, which status and every other request reads files with."""
        server.configuration.subscribe(self.settings_changed)

    # -- what makes it publish ------------------------------------------------------------

    def document_open(self, params: types.DidOpenTextDocumentParams) -> None:
        self.schedule(params.text_document.uri, 0.0)

    def document_change(self, params: types.DidChangeTextDocumentParams) -> None:
        self.schedule(params.text_document.uri)

    def document_save(self, params: types.DidSaveTextDocumentParams) -> None:
        if self.server.has_workspace:  # a script may exist now (AR107): the manifest is checked again
            self.server.ws.manifests.invalidate()
        self.schedule(params.text_document.uri, 0.0)

    def document_close(self, params: types.DidCloseTextDocumentParams) -> None:
        self.schedule(params.text_document.uri, 0.0)

    def settings_changed(self, settings: Settings) -> None:
        """New settings (another manifest, another device profile): publish everything again."""
        if self.server.has_workspace:
            self.republish()

    def live_trainers_changed(self) -> None:
        """A trainer's run started or ended: its AR013 comes or goes."""
        self.republish()

    def republish(self) -> None:
        for uri in list(self.published):
            self.schedule(uri, 0.0)

    def shutdown(self) -> None:
        """The client left: no publish is pending, and none of its documents is republished later."""
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        self.published.clear()
        self.sent_sequence.clear()
        self.session += 1

    # -- which files --------------------------------------------------------------------

    def manifest_path(self) -> Path:
        return self.server.ws.manifest_path().resolve()

    def buffer_text(self, path: Path) -> str | None:
        """The open buffer's text for a path, or None when it is not open."""
        uri = path_to_uri(path)
        document = self.server.workspace.text_documents.get(uri)
        return document.source if document is not None else None

    # -- publishing ---------------------------------------------------------------------

    def schedule(self, uri: str, delay: float = DEBOUNCE_SECONDS) -> None:
        timer = self.timers.pop(uri, None)
        if timer is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self.timers[uri] = loop.call_later(delay, self._publish_soon, uri)

    def _publish_soon(self, uri: str) -> None:
        """A timer's publish: the pass runs in a worker thread (see ``publish_uri``)."""
        self.timers.pop(uri, None)
        self.server.run_task(self._publish_isolated(uri), f"publishing the diagnostics of {uri}")

    async def _publish_isolated(self, uri: str) -> None:
        """A failure is logged with its traceback, and the next change retries."""
        try:
            await self.publish_uri(uri)
        except Exception:
            log.exception("publishing the diagnostics of %s failed", uri)

    async def publish_uri(self, uri: str) -> None:
        """Lint and publish what a change of ``uri`` touches.

        The pass (parsing the manifest, linting trainers: seconds for a big
        manifest) runs in a worker thread on a snapshot of the open buffers,
        so no request waits for it; what it found is sent from the event
        loop. A pass that ends after a later one began sends nothing the
        later one has already sent.
        """
        path = uri_to_path(uri)
        if path is None:
            return
        ws = self.server.ws
        self.sequence += 1
        sequence, session = self.sequence, self.session
        snapshot = _Snapshot(
            ws,
            self.manifest_path(),
            ws.state_root(),
            {u: d.source for u, d in self.server.workspace.text_documents.items()},
        )
        loop = asyncio.get_running_loop()
        found = await loop.run_in_executor(self._lints, snapshot.diagnostics, path.resolve())
        if session != self.session:
            return  # the client left meanwhile
        for target, diags, trainer in found:
            if self.sent_sequence.get(target, 0) > sequence:
                continue
            self.sent_sequence[target] = sequence
            if trainer is not None:
                diags = [*live_run_diagnostics(ws.insights, trainer), *diags]
            self.send(target, diags)
        self.server.active_changed()

    def send(self, uri: str, diags: list[Diag]) -> None:
        self.published.add(uri)
        self.server.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, diagnostics=[to_lsp(d) for d in diags])
        )


Found = list[tuple[str, list[Diag], Path | None]]
"""(document uri, its diagnostics, the trainer's path when the document is a trainer)."""


class _Snapshot:
    """One diagnostics pass, on the buffers as they were when it began (a worker thread's job)."""

    def __init__(self, ws: Workspace, manifest_path: Path, state_dir: Path, buffers: dict[str, str]) -> None:
        self.ws = ws
        self.manifest_path = manifest_path
        self.state_dir = state_dir
        self.buffers = buffers

    def buffer_text(self, path: Path) -> str | None:
        return self.buffers.get(path_to_uri(path))

    def text(self, path: Path) -> str | None:
        buffered = self.buffer_text(path)
        if buffered is not None:
            return buffered
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def manifest(self) -> ManifestResult | None:
        """The manifest as its buffer (or the file) holds it, parsed once per content."""
        path = self.manifest_path
        ws = self.ws
        buffered = self.buffer_text(path)
        if buffered is not None:
            return ws.manifests.get_text(buffered, path, ws.root, self.state_dir)
        if not path.exists():
            return None
        return ws.manifests.get(path, ws.root, self.state_dir, revalidate=True)

    def job_scripts(self, manifest: ManifestResult | None) -> set[Path]:
        if manifest is None:
            return set()
        scripts = {job.resolved_script(self.ws.root) for job in manifest.jobs.values()}
        return {s for s in scripts if s is not None}

    def is_trainer(self, path: Path, manifest: ManifestResult | None) -> bool:
        return path.suffix == ".py" and (path.name == "train.py" or path in self.job_scripts(manifest))

    def diagnostics(self, path: Path) -> Found:
        manifest = self.manifest()
        if path == self.manifest_path:
            return self.of_manifest(manifest)
        if self.is_trainer(path, manifest):
            return [self.of_trainer(path), *self.of_manifest(manifest)]
        return []

    def lint(self, path: Path) -> list[Diag]:
        """A trainer's gates: its open buffer's, else the file's (both cached by content)."""
        text = self.buffer_text(path)
        if text is None and not path.is_file():
            return []
        return self.ws.gates.lint_file(str(path), text)

    def of_trainer(self, path: Path) -> tuple[str, list[Diag], Path | None]:
        return (path_to_uri(path), self.lint(path), path)

    def of_manifest(self, manifest: ManifestResult | None) -> Found:
        if manifest is None:
            return []
        diags = list(manifest.diagnostics)
        for job in manifest.jobs.values():
            script = job.resolved_script(self.ws.root)
            if job.kind != "train" or script is None:
                continue
            errors = [d for d in self.lint(script) if d.is_error and d.holds_for(job.id)]
            if errors:
                diags.append(_ar108(job.id, job.span, str(manifest.path), str(script), errors))
        return [(path_to_uri(manifest.path), diags, None)]


def _ar108(job_id: str, span: Span, manifest: str, script: str, errors: list[Diag]) -> Diag:
    codes = ", ".join(sorted({d.code for d in errors}))
    first_line = Span(span.line, span.col, span.line, span.col + 1)
    return Diag(
        code="AR108",
        message=f"job `{job_id}`: its trainer {Path(script).name} fails {len(errors)} gate(s) ({codes})",
        severity="error",
        span=first_line,
        path=manifest,
        related=tuple(Related(script, d.span, f"{d.code}: {d.message}") for d in errors),
    )
