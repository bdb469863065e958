"""Quick fixes: the mechanical fix a diagnostic carries, and a suppression comment.

A diagnostic's fix travels in its ``data`` (``{"fix": {title, edits}}``), as
ruff does, so applying it needs no state in the server. A trainer diagnostic
sent back without it (a client that keeps only the contract's ``{code,
message, uri, range}`` of ``JobInfo.blockedBy``: the AIDE daemon) gets the fix
of the same finding in a fresh lint of the file as it is now, so its edits fit
the current text.
"""

from __future__ import annotations

import functools
from typing import Any

import attrs
from lsprotocol import types

from arena_ls.protocol.feature import LanguageFeature
from arena_ls.protocol.server import ArenaServer
from arena_ls.uris import uri_to_path


@functools.cache
def trainer_codes() -> frozenset[str]:
    """The trainer rules a ``# arena: ignore[CODE]`` comment silences (a syntax error cannot be).

    Read at the first code action: the rules' registry (every gate, some 50 ms to import) stays
    out of the server's start-up, before its ``initialize`` answer."""
    from arena_ls.gates.registry import RULES

    return frozenset(code for code in RULES if code != "AR000")


def _edit(raw: dict[str, Any]) -> types.TextEdit:
    start, end = raw["range"]["start"], raw["range"]["end"]
    return types.TextEdit(
        range=types.Range(
            start=types.Position(line=start["line"], character=start["character"]),
            end=types.Position(line=end["line"], character=end["character"]),
        ),
        new_text=raw["newText"],
    )


def _action(title: str, uri: str, edits: list[types.TextEdit], diag: types.Diagnostic) -> types.CodeAction:
    return types.CodeAction(
        title=title,
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diag],
        edit=types.WorkspaceEdit(changes={uri: edits}),
    )


def fix_action(uri: str, diag: types.Diagnostic) -> types.CodeAction | None:
    data = diag.data if isinstance(diag.data, dict) else None
    fix = data.get("fix") if data else None
    if not isinstance(fix, dict) or not isinstance(fix.get("edits"), list):
        return None
    try:
        edits = [_edit(raw) for raw in fix["edits"]]
    except (KeyError, TypeError):
        return None
    return _action(str(fix.get("title") or "Fix"), uri, edits, diag)


def suppress_action(uri: str, source: str, diag: types.Diagnostic) -> types.CodeAction:
    from arena_ls.gates import Finding, suppression_edit  # start-up speed: loaded on first use

    code = str(diag.code)
    finding = Finding(
        code=code,
        message=diag.message,
        severity="warning",
        line=diag.range.start.line,
        col=diag.range.start.character,
        end_line=diag.range.end.line,
        end_col=diag.range.end.character,
    )
    edit = suppression_edit(source, finding)
    text_edit = types.TextEdit(
        range=types.Range(
            start=types.Position(line=edit.line, character=edit.col),
            end=types.Position(line=edit.end_line, character=edit.end_col),
        ),
        new_text=edit.new_text,
    )
    return _action(f"Suppress {code} on this line", uri, [text_edit], diag)


class CodeActions(LanguageFeature):
    """Quick fixes for the server's own diagnostics (``source`` ``arena``)."""

    def __init__(self, server: ArenaServer) -> None:
        self.server = server

    def code_action(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        actions: list[types.CodeAction] = []
        for diag in params.context.diagnostics:
            if diag.source != "arena":
                continue
            action = fix_action(uri, diag) or self._fix_from_a_fresh_lint(uri, diag)
            if action is not None:
                actions.append(action)
            if str(diag.code) in trainer_codes():
                source = self.server.workspace.get_text_document(uri).source
                actions.append(suppress_action(uri, source, diag))
        return actions

    def _fix_from_a_fresh_lint(self, uri: str, diag: types.Diagnostic) -> types.CodeAction | None:
        """The fix of the same finding (code and first line) in a lint of the file as it is now."""
        if diag.data is not None or str(diag.code) not in trainer_codes():
            return None
        path = uri_to_path(uri)
        if path is None or path.suffix != ".py":
            return None
        document = self.server.workspace.text_documents.get(uri)
        text = document.source if document is not None else None
        if text is None and not path.is_file():
            return None
        for found in self.server.ws.gates.lint_file(str(path), text):
            if found.code == str(diag.code) and found.span.line == diag.range.start.line:
                return fix_action(uri, attrs.evolve(diag, data=found.data))
        return None
