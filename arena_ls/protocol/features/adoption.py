"""Code actions that bring a trainer under arena-ls as it is (contract 8.1).

- ``quickfix`` "Add the trainer kit beside this script": creates
  ``arena_trainer.py`` next to the script with the bytes of the installed kit
  (``importlib.util.find_spec("arena_trainer").origin``), so the trainer
  imports it whatever ``-E``/``-I`` do to ``sys.path``. Offered on a trainer's
  gate findings, or on a script that imports the kit, while the file beside it
  is missing. A different file of that name is never overwritten: the action
  is then offered disabled, with the reason.
- source action "Add this trainer to the manifest" (kind
  ``source.arena.addToManifest``) on any Python file of the workspace: a
  ``train`` job with the resume arguments its framework needs
  (``arena_ls.gates.enrol``), inserted into the manifest with every other byte
  kept, or a new manifest when there is none. A script the manifest already
  runs, or a manifest that is not a JSON object with a ``jobs`` list, gets the
  action disabled, with the reason.

"Add arena-ls's callback" travels in the findings' data like every gate fix
(``actions.fix_action``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

from lsprotocol import types

from arena_ls.protocol.feature import LanguageFeature
from arena_ls.protocol.server import ArenaServer
from arena_ls.uris import path_to_uri, uri_to_path

KIT_FILE = "arena_trainer.py"
KIT_TITLE = "Add the trainer kit beside this script"
MANIFEST_TITLE = "Add this trainer to the manifest"
ADD_TO_MANIFEST = "source.arena.addToManifest"
"""The source action's kind (a ``source`` action: editors list it under "Source Action...")."""


def kit_source() -> bytes | None:
    """The installed kit's bytes (the module ``pip install`` or the checkout provides), or None."""
    try:
        spec = importlib.util.find_spec("arena_trainer")
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    try:
        stat = os.stat(origin)
    except OSError:
        return None
    return _read_kit(origin, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_kit(origin: str, size: int, mtime_ns: int) -> bytes | None:
    """The kit's bytes, read once per version of the file (size and mtime are the key)."""
    del size, mtime_ns
    try:
        return Path(origin).read_bytes()
    except OSError:
        return None


def wants(only: Sequence[str] | None, kind: str) -> bool:
    """Whether the client asked for actions of ``kind`` (``only`` holds it or a parent kind)."""
    if not only:
        return True
    return any(kind == asked or kind.startswith(asked + ".") for asked in only)


def _create_with(uri: str, text: str) -> list[types.CreateFile | types.TextDocumentEdit]:
    """A new file holding ``text`` (never over an existing one)."""
    return [
        types.CreateFile(uri=uri, options=types.CreateFileOptions(overwrite=False, ignore_if_exists=True)),
        _edit_of(uri, types.Range(start=types.Position(line=0, character=0), end=types.Position(0, 0)), text),
    ]


def _edit_of(uri: str, where: types.Range, text: str) -> types.TextDocumentEdit:
    return types.TextDocumentEdit(
        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=None),
        edits=[types.TextEdit(range=where, new_text=text)],
    )


def _disabled(title: str, kind: str, reason: str) -> types.CodeAction:
    return types.CodeAction(title=title, kind=kind, disabled=types.CodeActionDisabled(reason=reason))


def kit_action(script: Path, diagnostics: list[types.Diagnostic]) -> types.CodeAction | None:
    """ "Add the trainer kit beside this script", or None when it is there (or not installed)."""
    source = kit_source()
    if source is None:
        return None
    beside = script.parent / KIT_FILE
    if script.name == KIT_FILE:
        return None
    try:
        present = beside.read_bytes()
    except FileNotFoundError:
        present = None
    except OSError as error:
        return _disabled(KIT_TITLE, types.CodeActionKind.QuickFix, f"cannot read {beside}: {error.strerror}")
    if present == source:
        return None
    if present is not None:
        return _disabled(
            KIT_TITLE,
            types.CodeActionKind.QuickFix,
            f"{beside.name} beside this script is another file: it is not overwritten "
            "(remove or rename it first)",
        )
    return types.CodeAction(
        title=KIT_TITLE,
        kind=types.CodeActionKind.QuickFix,
        diagnostics=diagnostics or None,
        edit=types.WorkspaceEdit(document_changes=_create_with(path_to_uri(beside), source.decode("utf-8"))),
    )


def manifest_action(
    script: Path, root: Path, manifest: Path, open_text: str | None
) -> types.CodeAction | None:
    """ "Add this trainer to the manifest": the job, into the manifest's text or a new manifest."""
    from arena_ls.gates import enrol  # start-up speed: the gates load on first use

    try:
        relative = script.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None  # outside the workspace: a job's script must be inside it
    try:
        source = script.read_bytes() if open_text is None else open_text.encode("utf-8")
    except OSError:
        return None
    kind = ADD_TO_MANIFEST
    text = _manifest_text(manifest)
    if text is None:
        job = enrol.job_for(relative, source)
        changes = _create_with(path_to_uri(manifest), enrol.new_manifest(job))
        return types.CodeAction(
            title=MANIFEST_TITLE, kind=kind, edit=types.WorkspaceEdit(document_changes=changes)
        )
    already = enrol.listed_as(text, relative)
    if already is not None:
        return _disabled(MANIFEST_TITLE, kind, f"the manifest already runs {relative} (job {already})")
    job = enrol.job_for(relative, source, enrol.job_ids(text))
    try:
        insertion = enrol.add_job(text, job)
    except enrol.ManifestUnusable as error:
        return _disabled(MANIFEST_TITLE, kind, str(error))
    start = enrol.lsp_position(text, insertion.start)
    end = enrol.lsp_position(text, insertion.end)
    where = types.Range(start=types.Position(*start), end=types.Position(*end))
    change = _edit_of(path_to_uri(manifest), where, insertion.new_text)
    return types.CodeAction(
        title=MANIFEST_TITLE, kind=kind, edit=types.WorkspaceEdit(document_changes=[change])
    )


def _manifest_text(manifest: Path) -> str | None:
    try:
        return manifest.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return ""  # unreadable: add_job says it is not JSON, and nothing is touched


def _asked(context: types.CodeActionContext) -> bool:
    """The source action is worked out when a person asks (a menu, a command, ``only`` naming it),
    not on every cursor move (an automatic request with no ``only``): it reads the script and the
    manifest, and the editors list source actions only when asked anyway."""
    if context.only:
        return True
    return context.trigger_kind != types.CodeActionTriggerKind.Automatic


class AdoptionActions(LanguageFeature):
    """The kit beside a script, and a script into the manifest."""

    def __init__(self, server: ArenaServer) -> None:
        self.server = server

    def code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        script = uri_to_path(params.text_document.uri)
        if script is None or script.suffix != ".py":
            return []
        only = params.context.only
        actions: list[types.CodeAction] = []
        if wants(only, types.CodeActionKind.QuickFix) and self._is_trainer(params):
            findings = [d for d in params.context.diagnostics if d.source == "arena"]
            kit = kit_action(script, findings)
            if kit is not None:
                actions.append(kit)
        if wants(only, ADD_TO_MANIFEST) and _asked(params.context):
            ws = self.server.ws
            manifest = ws.manifest_path()
            document = self.server.workspace.text_documents.get(params.text_document.uri)
            added = manifest_action(script, ws.root, manifest, document.source if document else None)
            if added is not None:
                actions.append(added)
        return actions

    def _is_trainer(self, params: types.CodeActionParams) -> bool:
        """A script with gate findings here, or one that imports the kit."""
        from arena_ls.protocol.features.actions import trainer_codes

        codes = trainer_codes()
        if any(d.source == "arena" and str(d.code) in codes for d in params.context.diagnostics):
            return True
        document = self.server.workspace.text_documents.get(params.text_document.uri)
        return document is not None and "arena_trainer" in document.source
