"""The arena-ls language server: custom methods, commands, notifications.

Every handler is thin: it parses params (``params.py``), calls the
supervisor or another plain module, and turns refusals into JSON-RPC
errors. Editor features (diagnostics, lenses, code actions) register
themselves from ``arena_ls.protocol.features``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from arena_ls import __version__
from arena_ls.errors import ArenaError, InvalidParams
from arena_ls.lifecycle.capture import LogLine
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.supervisor import StopRequest, Supervisor
from arena_ls.protocol import params as P
from arena_ls.protocol.converter import arena_converter
from arena_ls.protocol.echoes import bound, long_strings
from arena_ls.protocol.notify import LogBatcher
from arena_ls.protocol.progress import RunProgress
from arena_ls.protocol.transport import ArenaProtocol
from arena_ls.protocol.workspace import Workspace
from arena_ls.settings import Settings, parse_settings

log = logging.getLogger(__name__)

T = TypeVar("T")


class ArenaServer(LanguageServer):
    """The language server, holding this client's view of one workspace."""

    def __init__(
        self,
        workspace_factory: Callable[[ArenaServer, Path], Workspace] | None = None,
        hardware: Any = None,
    ) -> None:
        super().__init__(
            "arena-ls", __version__, protocol_cls=ArenaProtocol, converter_factory=arena_converter
        )
        self.hardware = hardware
        self.settings = Settings()
        self.init_settings = Settings()
        """Settings from ``initializationOptions``: the base that configuration changes apply to."""
        self.root = Path.cwd()
        self.workspace_factory = workspace_factory or Workspace
        self.arena: Workspace | None = None
        self.logs = LogBatcher(
            self.send_notification, lambda: self.settings.logs_notify_hz, refresh=self._follow_now
        )
        self.run_progress = RunProgress(self, self._cancel_run, self._gpu_text)

    # -- the listener the supervisor reports to -----------------------------------------

    def send_notification(self, method: str, payload: dict[str, Any]) -> None:
        self.protocol.notify(method, payload)

    def run_changed(self, view: RunView) -> None:
        info = self.ws.run_info(view)
        self.send_notification("arena/statusChanged", info)
        self.run_progress.update(view)
        if view.is_final and view.status.value == "crashed":
            failure = info.get("failure") or {}
            self.window_show_message(
                types.ShowMessageParams(
                    types.MessageType.Error,
                    f"{view.spec.job_name} crashed ({failure.get('kind', 'error')}): "
                    f"{failure.get('evidence', '')}",
                )
            )
        self.ws.active_changed()

    def run_lines(self, view: RunView, lines: list[LogLine]) -> None:
        self.logs.add(view.run_id, lines, skipped=view.take_unsummarised())
        self.run_progress.update(view)

    def lifecycle(self, view: RunView, text: str) -> None:
        kind = (
            types.MessageType.Warning
            if text.startswith(("warning", "TRAINING_CRASHED"))
            else types.MessageType.Info
        )
        self.window_log_message(types.LogMessageParams(kind, f"[{view.spec.job_id}] {text}"))

    def warning(self, text: str) -> None:
        """Damage found and repaired or ignored in the state folder: tell the user (once; stderr has it)."""
        self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"arena: {text}"))

    def _follow_now(self) -> None:
        """Read what the runs wrote since the last poll (just before ``arena/log`` is sent)."""
        if self.arena is not None:
            self.arena.supervisor.poll_once()

    def _gpu_text(self, view: RunView) -> str:
        """``GPU 3100 MB 87%`` for a run on a GPU, else nothing."""
        extras = self.ws.health.run_extras(view)
        if not extras:
            return ""
        return f"GPU {extras['gpuMemoryMb']} MB {extras['gpuUtilization']:.0f}%"

    def _cancel_run(self, run_id: str) -> None:
        """The client cancelled a run's progress: a cooperative stop."""

        async def stop() -> None:
            try:
                await self.ws.supervisor.stop(StopRequest(run_id=run_id, confirm=True, wait=False))
            except Exception:
                log.exception("stopping run %s after a progress cancel failed", run_id)

        asyncio.get_running_loop().create_task(stop())

    async def end_session(self) -> None:
        """The client left (TCP): close its view of the workspace; the runs go on."""
        if self.arena is not None:
            arena, self.arena = self.arena, None
            try:
                await arena.close()
            except Exception:  # the next client must still be served
                log.exception("closing the last client's workspace view failed")
        self.settings = self.init_settings = Settings()
        self.logs = LogBatcher(
            self.send_notification, lambda: self.settings.logs_notify_hz, refresh=self._follow_now
        )
        self.run_progress = RunProgress(self, self._cancel_run, self._gpu_text)

    # -- workspace ------------------------------------------------------------------------

    @property
    def ws(self) -> Workspace:
        if self.arena is None:
            self.arena = self.workspace_factory(self, self.root)
        return self.arena

    @property
    def supervisor(self) -> Supervisor:
        return self.ws.supervisor

    def apply_settings(self, options: Any, *, base: Settings | None = None) -> None:
        """Settings from the client on top of ``base`` (the initialization options)."""
        settings, problems = parse_settings(options, base or Settings())
        self.settings = settings
        for problem in problems:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, problem))
        if self.arena is not None:
            self.arena.settings_changed()
        feature = getattr(self, "diagnostics_feature", None)
        if feature is not None and self.arena is not None:
            for uri in list(feature.published):
                feature.schedule(uri, 0.0)


def refusals(handler: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Turn the project's refusals into JSON-RPC errors with ``error.data.reason``."""

    @functools.wraps(handler)
    async def wrapped(*args: Any, **kwargs: Any) -> T:
        try:
            return await handler(*args, **kwargs)
        except InvalidParams as error:
            longs = long_strings(args[1:])
            raise JsonRpcInvalidParams(bound(str(error), longs)) from error
        except ArenaError as error:
            longs = long_strings(args[1:])
            raise JsonRpcException(
                message=bound(error.message, longs), code=error.code, data=bound(error.data, longs)
            ) from error
        except (JsonRpcException, asyncio.CancelledError):
            raise
        except Exception as error:
            # The traceback goes to stderr, never to the client (it may quote the client's values).
            log.exception("%s failed", handler.__name__)
            what = bound(f"{type(error).__name__}: {error}", long_strings(args[1:]))
            raise JsonRpcInternalError(message=f"internal error: {what[:400]}") from error

    return wrapped


def create_server(
    workspace_factory: Callable[[ArenaServer, Path], Workspace] | None = None,
    *,
    hardware: Any = None,
) -> ArenaServer:
    """Build the server with every method and command registered.

    ``hardware`` replaces the real machine probe (tests inject a fake GPU
    and battery this way; the product always uses the real one).
    """
    server = ArenaServer(workspace_factory, hardware)
    _register_lifecycle(server)
    _register_methods(server)
    from arena_ls.protocol.features import register_all

    register_all(server)
    return server


def _register_lifecycle(server: ArenaServer) -> None:
    @server.feature(types.INITIALIZE)
    def on_initialize(ls: ArenaServer, params: types.InitializeParams) -> None:
        root = ls.workspace.root_path
        if root:
            ls.root = Path(root)
        ls.apply_settings(params.initialization_options)
        ls.init_settings = ls.settings
        ls.arena = None

    @server.feature(types.INITIALIZED)
    async def on_initialized(ls: ArenaServer, params: types.InitializedParams) -> None:
        ls.ws.start()
        await pull_configuration(ls)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def on_configuration(ls: ArenaServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and settings.get("arena") is not None:
            ls.apply_settings(settings["arena"], base=ls.init_settings)
        await pull_configuration(ls)

    @server.feature(types.SHUTDOWN)
    async def on_shutdown(ls: ArenaServer, params: Any) -> None:
        """Stop following runs; never stop a run (closing the editor never does)."""
        if ls.arena is not None:
            await ls.arena.close()


async def pull_configuration(ls: ArenaServer) -> None:
    """Read section ``arena`` when the client supports ``workspace/configuration``."""
    workspace = ls.client_capabilities.workspace
    if not (workspace and workspace.configuration):
        return
    try:
        result = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="arena")])
        )
    except Exception as error:
        log.info("workspace/configuration failed: %s", error)
        return
    if result and isinstance(result[0], dict):
        ls.apply_settings(result[0], base=ls.init_settings)


def _register_methods(server: ArenaServer) -> None:
    @server.feature("arena/start")
    @refusals
    async def start(ls: ArenaServer, params: Any) -> dict[str, Any]:
        return await ls.ws.start_job(P.parse_start(params))

    @server.feature("arena/stop")
    @refusals
    async def stop(ls: ArenaServer, params: Any) -> dict[str, Any]:
        return await ls.ws.stop_run(P.parse_stop(params))

    @server.feature("arena/status")
    @refusals
    async def status(ls: ArenaServer, params: Any) -> dict[str, Any]:
        P.parse_status(params)
        return await ls.ws.status()

    @server.feature("arena/logs")
    @refusals
    async def logs(ls: ArenaServer, params: Any) -> dict[str, Any]:
        run_id, cursor, limit = P.parse_logs(params)
        try:
            return await ls.supervisor.logs_async(run_id, cursor, limit)
        except ValueError as error:
            if isinstance(error, InvalidParams):
                raise
            raise InvalidParams(f"field `cursor`: {error}") from error

    @server.feature("arena/metrics")
    @refusals
    async def metrics(ls: ArenaServer, params: Any) -> dict[str, Any]:
        return ls.ws.metrics(P.parse_metrics(params))

    @server.command("arena.start")
    @refusals
    async def start_command(ls: ArenaServer, *args: Any) -> dict[str, Any]:
        return await ls.ws.start_job(P.parse_start(P.command_argument(args, "arena.start")))

    @server.command("arena.stop")
    @refusals
    async def stop_command(ls: ArenaServer, *args: Any) -> dict[str, Any]:
        return await ls.ws.stop_run(P.parse_stop(P.command_argument(args, "arena.stop")))

    @server.command("arena.status")
    @refusals
    async def status_command(ls: ArenaServer, *args: Any) -> dict[str, Any]:
        P.parse_status(P.command_argument(args, "arena.status"))
        return await ls.ws.status()
