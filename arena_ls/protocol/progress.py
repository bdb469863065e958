"""Work-done progress for runs: begin, rate-limited reports, end; cancel stops.

Each launch (and each relaunch) of a run gets a fresh token, since a token
can never be created twice. Clients without ``window.workDoneProgress`` get
the same text as throttled ``window/logMessage`` lines instead.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from arena_ls.lifecycle.runview import RunView

log = logging.getLogger(__name__)

REPORT_INTERVAL = 0.25
"""At most four reports a second."""
LOG_FALLBACK_INTERVAL = 5.0


class RunProgress:
    """Progress of every run this server follows, for one client."""

    def __init__(self, server: LanguageServer, on_cancel: Callable[[str], None]) -> None:
        self.server = server
        self.on_cancel = on_cancel
        self.tokens: dict[str, str] = {}
        self.launch_marks: dict[str, tuple[int, str]] = {}
        self.last_report: dict[str, float] = {}
        self.last_text: dict[str, str] = {}
        self.ending: set[str] = set()

    @property
    def supported(self) -> bool:
        window = self.server.client_capabilities.window
        return bool(window and window.work_done_progress)

    def update(self, view: RunView) -> None:
        """Called on every status change and progress of a run."""
        if view.is_final:
            self._end(view)
            return
        status = view.status.value
        if status == "running":
            mark = (view.state.restarts if view.state else 0, status)
            if self.launch_marks.get(view.run_id) != mark or view.run_id not in self.tokens:
                self.launch_marks[view.run_id] = mark
                self._begin(view)
                return
        self._report(view)

    def _begin(self, view: RunView) -> None:
        old = self.tokens.pop(view.run_id, None)
        if old is not None and self.supported:
            self.server.work_done_progress.end(old, types.WorkDoneProgressEnd(message="relaunched"))
        if not self.supported:
            self.server.window_log_message(
                types.LogMessageParams(types.MessageType.Info, f"{view.spec.job_name}: started")
            )
            self.tokens[view.run_id] = ""
            return
        token = f"arena-{view.run_id}-{uuid.uuid4().hex[:8]}"
        self.tokens[view.run_id] = token
        asyncio.get_running_loop().create_task(self._create_and_begin(view, token))

    async def _create_and_begin(self, view: RunView, token: str) -> None:
        try:
            await self.server.work_done_progress.create_async(token)
        except Exception as error:  # a client may refuse; fall back to log lines
            log.info("progress token refused: %s", error)
            self.tokens[view.run_id] = ""
            return
        if self.tokens.get(view.run_id) != token:
            return
        self.server.work_done_progress.begin(
            token,
            types.WorkDoneProgressBegin(
                title=view.spec.job_name,
                cancellable=True,
                message=view.progress.message(),
                percentage=view.progress.percentage or 0,
            ),
        )
        future = self.server.work_done_progress.tokens.get(token)
        if future is not None:
            future.add_done_callback(lambda f: self._cancelled(view.run_id, token, f))

    def _cancelled(self, run_id: str, token: str, future: Any) -> None:
        if future.cancelled() and self.tokens.get(run_id) == token and run_id not in self.ending:
            self.on_cancel(run_id)

    def _report(self, view: RunView) -> None:
        token = self.tokens.get(view.run_id)
        if token is None:
            return
        now = time.monotonic()
        text = view.progress.message()
        if view.state is not None and view.state.stalled:
            text += " · stalled"
        if view.status.value in ("stopping", "restarting"):
            text = f"{view.status.value} · {text}"
        interval = REPORT_INTERVAL if token else LOG_FALLBACK_INTERVAL
        if text == self.last_text.get(view.run_id) or now - self.last_report.get(view.run_id, 0) < interval:
            return
        self.last_report[view.run_id] = now
        self.last_text[view.run_id] = text
        if token:
            if token in self.server.work_done_progress.tokens:
                self.server.work_done_progress.report(
                    token, types.WorkDoneProgressReport(message=text, percentage=view.progress.percentage)
                )
        else:
            self.server.window_log_message(
                types.LogMessageParams(types.MessageType.Info, f"{view.spec.job_name}: {text}")
            )

    def _end(self, view: RunView) -> None:
        token = self.tokens.pop(view.run_id, None)
        if token is None:
            return
        self.ending.add(view.run_id)
        message = f"{view.status.value}"
        if view.state is not None and view.state.failure is not None:
            message += f": {view.state.failure.kind}"
        if token and token in self.server.work_done_progress.tokens:
            self.server.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
        elif not token:
            self.server.window_log_message(
                types.LogMessageParams(types.MessageType.Info, f"{view.spec.job_name}: {message}")
            )
