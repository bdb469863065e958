"""Work-done progress for runs: begin, rate-limited reports, end; cancel stops.

Each launch (and each relaunch) of a run gets a fresh token, since a token
can never be created twice. Messages follow the order the specification
requires: nothing is reported before ``begin`` went out, and ``end`` is sent
once. Clients without ``window.workDoneProgress`` get the same text as
throttled ``window/logMessage`` lines instead.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs
from lsprotocol import types
from pygls.lsp.server import LanguageServer

from arena_ls.lifecycle.runview import RunView
from arena_ls.protocol.tasks import TaskRunner

log = logging.getLogger(__name__)

REPORT_INTERVAL = 0.25
"""At most four reports a second."""
LOG_FALLBACK_INTERVAL = 5.0


@attrs.define
class Launch:
    """One launch of a run, as shown to the client."""

    token: str | None
    """None for clients without work-done progress (log lines instead)."""
    restarts: int
    begun: bool = False
    ended: bool = False
    final_message: str | None = None
    last_report: float = 0.0
    last_text: str = ""


class RunProgress:
    """Progress of every run this server follows, for one client."""

    def __init__(
        self,
        server: LanguageServer,
        tasks: TaskRunner,
        on_cancel: Callable[[str], None],
        extra_text: Callable[[RunView], str] = lambda view: "",
    ) -> None:
        self.server = server
        self.tasks = tasks
        self.on_cancel = on_cancel
        self.extra_text = extra_text
        self.launches: dict[str, Launch] = {}

    @property
    def supported(self) -> bool:
        window = self.server.client_capabilities.window
        return bool(window and window.work_done_progress)

    def update(self, view: RunView) -> None:
        """Called on every status change and progress of a run."""
        launch = self.launches.get(view.run_id)
        restarts = view.state.restarts if view.state else 0
        if view.is_final:
            if launch is not None:
                self._end(view, launch)
            return
        if view.status.value != "running" and launch is None:
            return
        if launch is None or (launch.restarts != restarts and view.status.value == "running"):
            if launch is not None:
                self._end(view, launch, "relaunched")
            self._begin(view, restarts)
            return
        self._report(view, launch)

    def _begin(self, view: RunView, restarts: int) -> None:
        if not self.supported:
            launch = Launch(token=None, restarts=restarts, begun=True)
            self.launches[view.run_id] = launch
            self._log(view, "started")
            return
        token = f"arena-{view.run_id}-{uuid.uuid4().hex[:8]}"
        launch = Launch(token=token, restarts=restarts)
        self.launches[view.run_id] = launch
        self.tasks.run_task(self._create_and_begin(view, launch), f"progress of run {view.run_id}")

    async def _create_and_begin(self, view: RunView, launch: Launch) -> None:
        assert launch.token is not None
        try:
            await self.server.work_done_progress.create_async(launch.token)
        except Exception as error:  # a client may refuse; fall back to log lines
            log.info("progress token refused: %s", error)
            launch.token = None
            launch.begun = True
            return
        progress = self.server.work_done_progress
        progress.begin(
            launch.token,
            types.WorkDoneProgressBegin(
                title=view.spec.job_name,
                cancellable=True,
                message=view.progress.message(),
                percentage=view.progress.percentage or 0,
            ),
        )
        launch.begun = True
        future = progress.tokens.get(launch.token)
        if future is not None:
            future.add_done_callback(lambda f: self._cancelled(view.run_id, launch, f))
        if launch.final_message is not None:
            self._send_end(launch, launch.final_message)

    def _cancelled(self, run_id: str, launch: Launch, future: Any) -> None:
        if future.cancelled() and not launch.ended and self.launches.get(run_id) is launch:
            self.on_cancel(run_id)

    def _text(self, view: RunView) -> str:
        text = view.progress.message()
        if view.state is not None and view.state.stalled:
            text += " · stalled"
        if view.status.value in ("stopping", "restarting"):
            text = f"{view.status.value} · {text}"
        extra = self.extra_text(view)
        return f"{text} · {extra}" if extra else text

    def _report(self, view: RunView, launch: Launch) -> None:
        if not launch.begun or launch.ended:
            return
        now = time.monotonic()
        interval = REPORT_INTERVAL if launch.token else LOG_FALLBACK_INTERVAL
        if now - launch.last_report < interval:
            return
        launch.last_report = now
        text = self._text(view)
        if text == launch.last_text:
            return
        launch.last_text = text
        if launch.token is None:
            self._log(view, text)
            return
        self.server.work_done_progress.report(
            launch.token, types.WorkDoneProgressReport(message=text, percentage=view.progress.percentage)
        )

    def _end(self, view: RunView, launch: Launch, message: str | None = None) -> None:
        if launch.ended:
            return
        if message is None:
            message = view.status.value
            if view.state is not None and view.state.failure is not None:
                message += f": {view.state.failure.kind}"
        if self.launches.get(view.run_id) is launch and view.is_final:
            del self.launches[view.run_id]
        if launch.token is None:
            launch.ended = True
            self._log(view, message)
        elif launch.begun:
            self._send_end(launch, message)
        else:
            launch.final_message = message  # sent right after begin

    def _send_end(self, launch: Launch, message: str) -> None:
        if launch.ended or launch.token is None:
            return
        launch.ended = True
        self.server.work_done_progress.end(launch.token, types.WorkDoneProgressEnd(message=message))

    def _log(self, view: RunView, text: str) -> None:
        self.server.window_log_message(
            types.LogMessageParams(types.MessageType.Info, f"{view.spec.job_name}: {text}")
        )
