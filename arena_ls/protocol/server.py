"""The arena-ls language server: custom methods, commands, notifications.

Every handler is thin: it parses params (``params.py``), calls the
workspace or another plain module, and turns refusals into JSON-RPC
errors (``rpc/refusals.py``). Editor features are plug-ins (``feature.py``):
the server holds them in a registry, and each LSP notification has one
handler here that calls every feature, each isolated from the others.
``app.create_server`` assembles the server with its features.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from arena_ls import __version__, loopcheck
from arena_ls.errors import InvalidParams
from arena_ls.health import Hardware, SystemHardware
from arena_ls.insights.model import Insight
from arena_ls.lifecycle.runview import RunView
from arena_ls.lifecycle.stopper import StopRequest
from arena_ls.protocol import gc_freeze, loopaudit, warmup
from arena_ls.protocol import params as P
from arena_ls.protocol.backends import server_backends
from arena_ls.protocol.configuration import Configuration
from arena_ls.protocol.feature import Command, FeatureRegistry, LanguageFeature
from arena_ls.protocol.notify import LogBatcher
from arena_ls.protocol.rpc.converter import arena_converter
from arena_ls.protocol.rpc.preencoded import PreEncoded
from arena_ls.protocol.rpc.refusals import refusals
from arena_ls.protocol.rpc.transport import ArenaProtocol
from arena_ls.protocol.tasks import TaskRunner
from arena_ls.protocol.wire import passing_info
from arena_ls.protocol.work_done_progress import RunProgress
from arena_ls.protocol.workspace import Workspace
from arena_ls.run.agent_records import AgentRecord
from arena_ls.run.capture import LogLine
from arena_ls.settings import Settings, parse_settings

log = logging.getLogger(__name__)

T = TypeVar("T")
F = TypeVar("F", bound=LanguageFeature)

FLUSH_POLL_AGE = 0.005
"""An ``arena/log`` flush reads the runs first unless the follower did less than 5 ms ago."""
BATTERY_TOLD_KEPT = 256
"""Runs whose battery stop was shown, remembered (the oldest forgotten first)."""


class ArenaServer(LanguageServer):
    """The language server, holding this client's view of one workspace."""

    def __init__(self, hardware: Hardware | None = None) -> None:
        super().__init__(
            "arena-ls", __version__, protocol_cls=ArenaProtocol, converter_factory=arena_converter
        )
        self.hardware = hardware
        """Tests inject a fake machine; None: the real one (``SystemHardware``)."""
        self.configuration = Configuration()
        self._problems_shown: frozenset[str] = frozenset()
        """The settings problems last shown: the same settings read twice warn once."""
        self.root = Path.cwd()
        self.arena: Workspace | None = None
        self.warmed: asyncio.Future[None] | None = None
        """The warm-up's imports of the workspace's modules (``warmup.py``), begun at ``initialize``."""
        self.first_status = warmup.FirstStatus()
        """When this session's first ``arena/status`` is answered (start-up's own work waits)."""
        self.features = FeatureRegistry()
        self.tasks = TaskRunner()
        self.logs = self._log_batcher()
        self.run_progress = RunProgress(self, self.tasks, self._cancel_run, self._gpu_text)
        self._battery_told: tuple[str, ...] = ()
        """Runs whose battery stop was shown (bounded, newest last)."""

    # -- plug-ins and background work -----------------------------------------------------

    def add_feature(self, feature: LanguageFeature) -> None:
        """Plug a feature in (before the server starts): its hooks are called from now on."""
        self.features.add(feature)
        for name, command in feature.commands().items():
            self.command(name)(_command_handler(command))

    def get_feature(self, kind: type[F]) -> F | None:
        """The feature of that type, if one was added."""
        return self.features.get(kind)

    def run_task(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Background work: kept until done, its failure logged with its traceback."""
        return self.tasks.run_task(coro, name)

    # -- settings ---------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.configuration.settings

    def apply_settings(self, options: Any, *, base: Settings | None = None) -> None:
        """Settings from the client on top of ``base`` (the initialization options); subscribers hear.

        Editors send the same settings as ``initializationOptions`` and again
        through ``workspace/configuration``: a problem is shown when it first
        appears, not each time the same settings are read.
        """
        settings, problems = parse_settings(options, base or Settings())
        for problem in problems:
            if problem not in self._problems_shown:
                self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, problem))
        self._problems_shown = frozenset(problems)
        self.configuration.update(settings)

    # -- the listener the workspace reports to -----------------------------------------------

    def send_notification(self, method: str, payload: dict[str, Any]) -> None:
        self.protocol.notify(method, payload)

    def run_changed(self, view: RunView) -> None:
        info = self._announce(view)
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
        self._tell_battery_stop(view, info)
        self.active_changed()

    def _tell_battery_stop(self, view: RunView, info: dict[str, Any]) -> None:
        """A run the power rule stopped (contract 7.3): one warning per run, in every editor."""
        if info.get("stoppedBy") != "battery" or view.run_id in self._battery_told:
            return
        self._battery_told = (*self._battery_told[-(BATTERY_TOLD_KEPT - 1) :], view.run_id)
        then = "it starts again, resuming, when power returns" if not view.is_final else "it stays stopped"
        self.window_show_message(
            types.ShowMessageParams(
                types.MessageType.Warning,
                f"{view.spec.job_name} was stopped: the machine is on battery (power.onBattery); {then}",
            )
        )

    def _announce(self, view: RunView) -> dict[str, Any]:
        """``arena/statusChanged`` with the run's ``RunInfo``, after each status it passed through
        since the last announcement (a stop, a relaunch no poll caught: the follower rebuilds them,
        ``follower_told``); the info is returned."""
        info = self.ws.run_info(view)
        for status, restarts in self.ws.statuses_missed(view):
            self.send_notification("arena/statusChanged", passing_info(info, status, restarts))
        self.send_notification("arena/statusChanged", info)
        return info

    def run_lines(self, view: RunView, lines: list[LogLine]) -> None:
        self.logs.add(view.run_id, lines, skipped=view.take_unsummarised())
        self.run_progress.update(view)

    def lifecycle(self, view: RunView, event: AgentRecord) -> None:
        kind = types.MessageType.Warning if event.is_warning else types.MessageType.Info
        self.window_log_message(types.LogMessageParams(kind, f"[{view.spec.job_id}] {event.render()}"))

    def warning(self, text: str) -> None:
        """Damage found and repaired or ignored in the state folder: tell the user (once; stderr has it)."""
        self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, f"arena: {text}"))

    def insights_changed(self, view: RunView, new: list[Insight]) -> None:
        """The run's insights changed: its ``RunInfo`` again (after any status it passed through since
        the last announcement, as ``run_changed`` does), and a warning per kind new to the run."""
        self._announce(view)
        for insight in new:
            kind = types.MessageType.Warning if insight.severity == "warning" else types.MessageType.Info
            self.window_show_message(
                types.ShowMessageParams(kind, f"{view.spec.job_name}: {insight.kind}: {insight.message}")
            )

    def live_trainers_changed(self) -> None:
        self.features.notify("live_trainers_changed", lambda f: f.live_trainers_changed())

    def active_changed(self) -> None:
        """Runnability or the active run may have changed (the lenses follow)."""
        self.features.notify("active_changed", lambda f: f.active_changed())

    def _follow_now(self) -> None:
        """Read what the runs wrote since the last poll (just before ``arena/log`` is sent)."""
        if self.arena is not None:
            self.arena.read_runs_now(FLUSH_POLL_AGE)

    def _gpu_text(self, view: RunView) -> str:
        return self.ws.gpu_text(view)

    def _cancel_run(self, run_id: str) -> None:
        """The client cancelled a run's progress: a cooperative stop."""
        stop = self.ws.stop_run(StopRequest(run_id=run_id, confirm=True, wait=False))
        self.run_task(stop, f"stopping run {run_id} after a progress cancel")

    def _log_batcher(self) -> LogBatcher:
        return LogBatcher(
            self.send_notification, lambda: self.settings.logs_notify_hz, refresh=self._follow_now
        )

    async def end_session(self) -> None:
        """The client left (TCP): close its view of the workspace; the runs go on.

        Features drop their pending work first, so that no timer of the last
        client's (a debounced publish) opens the workspace again for nobody.
        """
        # Everything of the session is reset before the first await: the next client may be
        # served while the old view is still closing (rpc/serving.py lets the leaver go at once).
        self.features.notify("shutdown", lambda f: f.shutdown())
        arena, self.arena = self.arena, None
        self.configuration.reset()
        self.logs = self._log_batcher()
        self.run_progress = RunProgress(self, self.tasks, self._cancel_run, self._gpu_text)
        if arena is not None:
            try:
                await arena.close()
            except Exception:  # the next client must still be served
                log.exception("closing the last client's workspace view failed")

    # -- workspace ------------------------------------------------------------------------

    @property
    def ws(self) -> Workspace:
        if self.arena is None:
            hardware = self.hardware if self.hardware is not None else SystemHardware()
            backends = server_backends()
            self.arena = Workspace(self.root, self.configuration, self, hardware, self.tasks, backends)
        return self.arena

    async def open_workspace(self) -> Workspace:
        """``ws``, opened once the warm-up imported its modules (on a worker thread, begun at
        ``initialize``): the event loop never imports them (issue 38 item 7)."""
        if self.arena is None and self.warmed is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.warmed), warmup.WAIT_FOR_IMPORTS)
        return self.ws

    @property
    def has_workspace(self) -> bool:
        """Whether this client's workspace is open (features never open it early)."""
        return self.arena is not None


def _command_handler(command: Command) -> Callable[..., Awaitable[Any]]:
    """A feature's command as pygls calls it (the server first), with refusals as JSON-RPC errors."""

    @refusals
    async def run(ls: ArenaServer, *args: Any) -> Any:
        return await command(*args)

    return run


def register_handlers(server: ArenaServer) -> None:
    """Every LSP method, command and notification of the server, registered once."""
    _register_lifecycle(server)
    _register_methods(server)
    _register_feature_fan_out(server)


def _register_lifecycle(server: ArenaServer) -> None:
    @server.feature(types.INITIALIZE)
    def on_initialize(ls: ArenaServer, params: types.InitializeParams) -> None:
        root = ls.workspace.root_path
        if root:
            ls.root = Path(root)
        ls.apply_settings(params.initialization_options)
        ls.configuration.base = ls.settings
        if ls.arena is not None:  # opened before this session began: it saw the old root and settings
            ls.run_task(ls.arena.close(), "closing a workspace view opened before initialize")
        ls.arena = None
        ls.warmed = warmup.warm_up(ls.protocol)  # while the client reads the answer (warmup.py)
        ls.first_status = warmup.FirstStatus()

    @server.feature(types.INITIALIZED)
    async def on_initialized(ls: ArenaServer, params: types.InitializedParams) -> None:
        loopaudit.begin()  # a debug record, off unless ARENA_LOOP_AUDIT is set (tests)
        (await ls.open_workspace()).start()
        await pull_configuration(ls)
        ls.ws.resume_after_reboot()  # watchdog.afterReboot, now that the client's settings are in
        ls.run_task(ls.first_status.then(ls.ws.start_up_work), "reading the GPUs, judging the trainers")
        gc_freeze.freeze_soon()  # not now: the client's first status is on its way (gc_freeze.py)
        loopcheck.arm()  # the slow-callback check (tests) counts from here: start-up is behind us

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def on_configuration(ls: ArenaServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if isinstance(settings, dict) and settings.get("arena") is not None:
            ls.apply_settings(settings["arena"], base=ls.configuration.base)
        await pull_configuration(ls)

    @server.feature(types.SHUTDOWN)
    async def on_shutdown(ls: ArenaServer, params: Any) -> None:
        """Stop following runs; never stop a run (closing the editor never does)."""
        ls.features.notify("shutdown", lambda f: f.shutdown())
        arena, ls.arena = ls.arena, None  # closed once: the end of the connection closes what is left
        if arena is not None:
            await arena.close()


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
        ls.apply_settings(result[0], base=ls.configuration.base)


def _register_feature_fan_out(server: ArenaServer) -> None:
    """One handler per notification and request that features answer; each calls every feature."""

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: ArenaServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.features.notify("document_open", lambda f: f.document_open(params))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: ArenaServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.features.notify("document_change", lambda f: f.document_change(params))

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: ArenaServer, params: types.DidSaveTextDocumentParams) -> None:
        ls.features.notify("document_save", lambda f: f.document_save(params))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: ArenaServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.features.notify("document_close", lambda f: f.document_close(params))

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(ls: ArenaServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        return await ls.features.gather_async("code_lens", lambda f: f.code_lens(params))

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[
                types.CodeActionKind.QuickFix,
                types.CodeActionKind.Source,
                "source.arena.addToManifest",
            ]
        ),
    )
    async def code_action(ls: ArenaServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        """On a worker thread: the fixes load the gates' rules at first use (the server itself lints
        in the gates' worker process, so nothing else loaded them), and the adoption actions read
        the script, the manifest and the kit: none of that may hold the event loop."""
        return await asyncio.to_thread(ls.features.gather, "code_action", lambda f: f.code_action(params))


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
    async def status(ls: ArenaServer, params: Any) -> dict[str, Any] | PreEncoded:
        runs_limit = P.parse_status(params)
        answer = await (await ls.open_workspace()).status(runs_limit)
        loopaudit.first_status_answered()
        ls.first_status.answered()
        return answer

    @server.feature("arena/runs")
    @refusals
    async def runs(ls: ArenaServer, params: Any) -> dict[str, Any] | PreEncoded:
        return await ls.ws.runs_page(*P.parse_runs(params))

    @server.feature("arena/logs")
    @refusals
    async def logs(ls: ArenaServer, params: Any) -> dict[str, Any]:
        run_id, cursor, limit = P.parse_logs(params)
        try:
            return await ls.ws.logs(run_id, cursor, limit)
        except ValueError as error:
            if isinstance(error, InvalidParams):
                raise
            raise InvalidParams(f"field `cursor`: {error}") from error

    @server.feature("arena/metrics")
    @refusals
    async def metrics(ls: ArenaServer, params: Any) -> dict[str, Any] | PreEncoded:
        return await ls.ws.metrics(*P.parse_metrics(params))

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
    async def status_command(ls: ArenaServer, *args: Any) -> dict[str, Any] | PreEncoded:
        return await ls.ws.status(P.parse_status(P.command_argument(args, "arena.status")))
