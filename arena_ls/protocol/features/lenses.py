"""Code lenses on each manifest job: ▶ Run, ⛔ Blocked (N gate failures), ■ Stop.

Lenses are refreshed (``workspace/codeLens/refresh``) when a job's
runnability or the active run changes, for clients that support it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from arena_ls.errors import InvalidParams
from arena_ls.protocol import params as P
from arena_ls.protocol.jobs import job_infos
from arena_ls.uris import uri_to_path

if TYPE_CHECKING:
    from arena_ls.protocol.server import ArenaServer


def _lens(line: int, title: str, command: str, argument: dict[str, Any]) -> types.CodeLens:
    position = types.Position(line=line, character=0)
    return types.CodeLens(
        range=types.Range(start=position, end=position),
        command=types.Command(title=title, command=command, arguments=[argument]),
    )


def manifest_lenses(ls: ArenaServer) -> list[types.CodeLens]:
    ws = ls.ws
    manifest = ws.manifest()
    if manifest.fatal:
        return []
    active = ws.supervisor.active_view()
    infos = {info["id"]: info for info in job_infos(ws, manifest)}
    lenses: list[types.CodeLens] = []
    for job in manifest.jobs.values():
        line = job.span.line
        info = infos.get(job.id, {})
        if active is not None and active.spec.job_id == job.id:
            lenses.append(
                _lens(
                    line, f"■ Stop {job.display_name} ({active.status.value})", "arena.stop", {"id": job.id}
                )
            )
        elif info.get("runnable") and job.status == "approval-required":
            # Clicking a lens that says "approve" is the explicit approval.
            title = f"▶ Approve and run {job.display_name}"
            lenses.append(_lens(line, title, "arena.start", {"id": job.id, "approved": True}))
        elif info.get("runnable"):
            lenses.append(_lens(line, f"▶ Run {job.display_name}", "arena.start", {"id": job.id}))
        elif job.status == "disabled":
            lenses.append(_lens(line, "⛔ Disabled", "arena.showBlocked", {"id": job.id}))
        else:
            count = len(info.get("blockedBy", []))
            lenses.append(
                _lens(line, f"⛔ Blocked: {count} gate failures", "arena.showBlocked", {"id": job.id})
            )
    return lenses


async def _refresh_quietly(server: ArenaServer) -> None:
    """A client that advertises refresh but fails it must not disturb anything."""
    with contextlib.suppress(Exception):
        await server.workspace_code_lens_refresh_async(None)


def register(server: ArenaServer) -> None:
    last_state: dict[str, Any] = {}

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    def code_lens(ls: ArenaServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        path = uri_to_path(params.text_document.uri)
        if path is None or path.resolve() != ls.supervisor.manifest_path().resolve():
            return []
        return manifest_lenses(ls)

    @server.command("arena.showBlocked")
    async def show_blocked(ls: Any, *args: Any) -> dict[str, Any]:
        # ``ls`` is annotated ``Any``: pygls resolves a command's type hints at
        # call time, and ArenaServer is only imported for type checking here.
        try:
            params = P.as_object(
                P.command_argument(args, "arena.showBlocked"), "arena.showBlocked", required=("id",)
            )
        except InvalidParams as error:
            from pygls.exceptions import JsonRpcInvalidParams

            raise JsonRpcInvalidParams(str(error)) from error
        infos = {info["id"]: info for info in job_infos(ls.ws, ls.ws.manifest())}
        info = infos.get(params["id"], {"blockedBy": []})
        lines = [f"{d['code']} {d['message']}" for d in info["blockedBy"]]
        text = (
            f"{params['id']} is blocked by: " + "; ".join(lines)
            if lines
            else f"{params['id']} is not blocked"
        )
        ls.window_show_message(types.ShowMessageParams(types.MessageType.Warning, text))
        return {"id": params["id"], "blockedBy": info["blockedBy"]}

    def refresh() -> None:
        """Ask the client to refresh lenses when what they show has changed."""
        workspace = server.client_capabilities.workspace
        if not (workspace and workspace.code_lens and workspace.code_lens.refresh_support):
            return
        try:
            ws = server.ws
            active = ws.supervisor.active_view()
            state = {
                "active": (active.run_id, active.status.value) if active else None,
                "jobs": [(i["id"], i["runnable"], len(i["blockedBy"])) for i in job_infos(ws, ws.manifest())],
            }
        except Exception:
            return
        if state != last_state:
            last_state.clear()
            last_state.update(state)
            asyncio.get_running_loop().create_task(_refresh_quietly(server))

    server.on_active_changed = refresh  # type: ignore[attr-defined]
