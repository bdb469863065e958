"""Code lenses on every manifest job: ▶ Run, ■ Stop, or ⛔ Blocked naming the first reason
(a trainer gate or the entry's own manifest error: duplicate id, bare ``python``, ...).

Lenses are refreshed (``workspace/codeLens/refresh``) when a job's
runnability or the active run changes, for clients that support it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from lsprotocol import types

from arena_ls.lifecycle.runview import RunView
from arena_ls.manifest import ManifestResult
from arena_ls.protocol import params as P
from arena_ls.protocol.feature import Command, LanguageFeature
from arena_ls.protocol.rpc.bounded_errors import bound, long_strings
from arena_ls.protocol.server import ArenaServer
from arena_ls.uris import uri_to_path

log = logging.getLogger(__name__)


def _lens(line: int, title: str, command: str, argument: dict[str, Any]) -> types.CodeLens:
    position = types.Position(line=line, character=0)
    return types.CodeLens(
        range=types.Range(start=position, end=position),
        command=types.Command(title=title, command=command, arguments=[argument]),
    )


BLOCKED_REASON_CHARS = 80
"""The first reason is cut here so a lens stays one readable line."""


def blocked_title(blocked_by: list[dict[str, Any]], fallback: str) -> str:
    """``⛔ Blocked: AR103 two jobs share the id `lm` (+1 more)``: the first reason, named."""
    if not blocked_by:
        return f"⛔ Blocked: {fallback}"
    first = blocked_by[0]
    reason = " ".join(f"{first.get('code', '')} {first.get('message', '')}".split())
    if len(reason) > BLOCKED_REASON_CHARS:
        reason = reason[: BLOCKED_REASON_CHARS - 1].rstrip() + "…"
    more = f" (+{len(blocked_by) - 1} more)" if len(blocked_by) > 1 else ""
    return f"⛔ Blocked: {reason}{more}"


def _manifest_error_reasons(manifest: ManifestResult) -> list[dict[str, Any]]:
    return [d.to_wire() for d in manifest.errors]


def _entries(manifest: ManifestResult) -> list[tuple[str, int]]:
    """Every job entry with an id and its line (both entries of a duplicated id)."""
    if manifest.entry_lines:
        return list(manifest.entry_lines)
    return [(job.id, job.span.line) for job in manifest.jobs.values()]


def job_lens(
    manifest: ManifestResult, job_id: str, line: int, info: dict[str, Any], active: RunView | None
) -> types.CodeLens:
    """The one lens of a job entry: stop it (``active`` is its run), run it, or say what blocks it."""
    job = manifest.jobs.get(job_id)
    argument = {"id": job_id}
    if job is None:
        reasons = info.get("blockedBy") or []
        if not reasons and manifest.fatal:
            reasons = _manifest_error_reasons(manifest)
        title = blocked_title(reasons, "the manifest entry has errors")
        return _lens(line, title, "arena.showBlocked", argument)
    if active is not None and active.spec.job_id == job.id:
        title = f"■ Stop {job.display_name} ({active.status.value})"
        return _lens(line, title, "arena.stop", argument)
    if info.get("runnable") and job.status == "approval-required":
        # Clicking a lens that says "approve" is the explicit approval.
        title = f"▶ Approve and run {job.display_name}"
        return _lens(line, title, "arena.start", {"id": job.id, "approved": True})
    if info.get("runnable"):
        return _lens(line, f"▶ Run {job.display_name}", "arena.start", argument)
    if job.status == "disabled":
        return _lens(line, "⛔ Disabled", "arena.showBlocked", argument)
    title = blocked_title(info.get("blockedBy") or [], "gate failures")
    return _lens(line, title, "arena.showBlocked", argument)


async def manifest_lenses(ls: ArenaServer) -> list[types.CodeLens]:
    """One lens per job entry of the manifest, runnable or not (a blocked one names why)."""
    manifest = await ls.ws.manifest_async()
    infos = {info["id"]: info for info in await ls.ws.job_infos(manifest)}
    active = ls.ws.active_view()  # once: it reads the run lock
    return [
        job_lens(manifest, job_id, line, infos.get(job_id, {}), active) for job_id, line in _entries(manifest)
    ]


async def _refresh_quietly(server: ArenaServer) -> None:
    """A client that advertises refresh but fails it must not disturb anything."""
    with contextlib.suppress(Exception):
        await server.workspace_code_lens_refresh_async(None)


class CodeLenses(LanguageFeature):
    """The lenses of the manifest, ``arena.showBlocked``, and the refresh when what they show changes."""

    def __init__(self, server: ArenaServer) -> None:
        self.server = server
        self.last_state: dict[str, Any] | None = None
        """What the lenses showed when the client was last asked to refresh them."""
        self._checking: asyncio.Task[None] | None = None
        self._look_again = False

    def commands(self) -> dict[str, Command]:
        return {"arena.showBlocked": self.show_blocked}

    async def code_lens(self, params: types.CodeLensParams) -> list[types.CodeLens]:
        path = uri_to_path(params.text_document.uri)
        if path is None or path.resolve() != self.server.ws.manifest_path().resolve():
            return []
        return await manifest_lenses(self.server)

    async def show_blocked(self, *args: Any) -> dict[str, Any]:
        """``arena.showBlocked {id}``: what blocks a job, as a message and as the answer."""
        job_id = P.parse_show_blocked(P.command_argument(args, "arena.showBlocked"))
        ws = self.server.ws
        infos = {info["id"]: info for info in await ws.job_infos(judged=True)}  # a person asked
        info = infos.get(job_id, {"blockedBy": []})
        lines = [f"{d['code']} {d['message']}" for d in info["blockedBy"]]
        echoed = bound(job_id, long_strings(job_id))
        text = f"{echoed} is blocked by: " + "; ".join(lines) if lines else f"{echoed} is not blocked"
        self.server.window_show_message(types.ShowMessageParams(types.MessageType.Warning, text))
        return {"id": echoed, "blockedBy": info["blockedBy"]}

    def active_changed(self) -> None:
        """Ask the client to refresh lenses when what they show has changed.

        Worked out in a task (the job list is built in a worker thread), one at a
        time: a change while one is under way makes it look once more."""
        if not self._client_refreshes():
            return
        if self._checking is not None and not self._checking.done():
            self._look_again = True
            return
        self._checking = self.server.run_task(self._refresh_if_changed(), "code lens refresh")

    async def _refresh_if_changed(self) -> None:
        self._look_again = True
        while self._look_again:
            self._look_again = False
            state = await self._shown_state()
            if state is not None and state != self.last_state:
                self.last_state = state
                self.server.run_task(_refresh_quietly(self.server), "code lens refresh")

    def _client_refreshes(self) -> bool:
        workspace = self.server.client_capabilities.workspace
        return bool(workspace and workspace.code_lens and workspace.code_lens.refresh_support)

    async def _shown_state(self) -> dict[str, Any] | None:
        """The active run and each job's runnability (None when the workspace cannot be read now)."""
        try:
            ws = self.server.ws
            infos = await ws.job_infos()
            active = ws.active_view()
            return {
                "active": (active.run_id, active.status.value) if active else None,
                "jobs": [(i["id"], i["runnable"], len(i["blockedBy"])) for i in infos],
            }
        except Exception:
            log.debug("reading what the lenses show failed", exc_info=True)
            return None
