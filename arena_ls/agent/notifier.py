"""The job agent tells the person what happened to a run, with no editor open (contract 8.3).

The agent's state writer hands every state it writes to ``Notifier.observe``
(on the writer's thread); ``notify_events.NotifyTracker`` says which events
are new. Each new event is recorded at once in the run's log, as a
``notified`` record with its key, and then sent on the notifier's own thread,
so that nothing a notification does (a slow notification server, a command
that hangs) holds up the state's writes or the trainer:

- ``notify.desktop``: ``platform_notify.notify_desktop``;
- ``notify.command``: the argument list, never through a shell, with the
  event as one JSON object on its standard input; killed with its process
  tree after ``COMMAND_TIMEOUT`` seconds. Its failure is a line in the run's
  log, never the run's.

The record comes before the sending: each event is told at most once, even
by an agent that starts again on the same run (``told_keys`` reads the
records back from the ``arena`` stream only: a trainer that prints a record's
words cannot silence one).
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from arena_ls import platform
from arena_ls.agent.notify_events import NotifyEvent, NotifyTracker
from arena_ls.platform_notify import desktop_unavailable
from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord, Kind
from arena_ls.run.rundir import NotifySpec, RunSpec

log = logging.getLogger("arena_ls.agent")

COMMAND_TIMEOUT = 10.0
"""``notify.command`` is killed past this many seconds (contract 8.3)."""
CLOSE_PATIENCE = 2 * COMMAND_TIMEOUT + 5.0
"""How long the agent's end waits for the last events to be sent (a desktop one, then the command)."""
STDERR_KEPT = 400
"""Characters of a failing command's standard error kept in the run's log."""

Desktop = Callable[[str, str], str]
"""Shows a notification (title, body); what showed it, or ``NotifyUnavailable``."""


def told_keys(run_dir: Path) -> list[str]:
    """The keys of the events the run's log says were told (its ``arena`` stream's records)."""
    from arena_ls.run.capture_records import iter_all_lines

    try:
        return [
            key
            for line in iter_all_lines(run_dir)
            if line.stream == "arena" and line.event is not None and line.event.kind is Kind.NOTIFIED
            for key in [line.event.text_field("key")]
            if key is not None
        ]
    except (OSError, ValueError) as error:  # a damaged log: what it held cannot be known
        log.warning("could not read the run's log for its notifications: %s", error)
        return []


class Notifier:
    """Tells the events of one run: recorded through ``tell``, sent on a thread of its own."""

    def __init__(
        self,
        spec: RunSpec,
        notify: NotifySpec,
        log_path: Path,
        tell: Callable[[AgentRecord], None],
        *,
        told: Iterable[str] = (),
        desktop: Desktop | None = None,
        command_timeout: float = COMMAND_TIMEOUT,
    ) -> None:
        self.notify = notify
        self.tell = tell
        self.tracker = NotifyTracker(spec.run_id, spec.job_name, str(log_path), set(told))
        self._desktop = desktop
        self.command_timeout = command_timeout
        self._lock = threading.Lock()
        self._queue: queue.Queue[NotifyEvent | None] = queue.Queue()
        self._failed: set[str] = set()
        """The channels whose failure was said in the run's log (once each: later ones go to agent.log)."""
        self._desktop_off = desktop_unavailable() if notify.desktop and desktop is None else None
        """Why no desktop notification can be shown on this machine at all (said once, at the first state)."""
        self._said_desktop_off = False
        self._thread = threading.Thread(target=self._send_all, name="notifier", daemon=True)
        self._thread.start()

    @property
    def active(self) -> bool:
        return self.notify.desktop or bool(self.notify.command)

    def observe(self, state: Any) -> None:
        """A state the agent writes (its JSON payload): record and queue the events it shows first."""
        if not isinstance(state, dict):
            return
        with self._lock:
            if self._desktop_off is not None and not self._said_desktop_off:
                self._said_desktop_off = True
                self.tell(
                    agent_records.note(f"desktop notifications are off on this machine: {self._desktop_off}")
                )
            for event in self.tracker.observe(state):
                self.tell(agent_records.notified(event.key, f"{event.title}: {event.message}"))
                self._queue.put(event)

    def close(self, timeout: float = CLOSE_PATIENCE) -> bool:
        """Send what is queued (at most ``timeout`` seconds), then stop; False when it did not finish."""
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # -- sending ---------------------------------------------------------------------------

    def _send_all(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            self.send(event)

    def send(self, event: NotifyEvent) -> None:
        """Each channel that is on, each failure said (the run goes on whatever happens here)."""
        if self.notify.desktop and self._desktop_off is None:
            self._channel("desktop notification", lambda: self._show(event))
        if self.notify.command:
            command = self.notify.command
            self._channel("notify.command", lambda: run_command(command, event.payload, self.command_timeout))

    def _show(self, event: NotifyEvent) -> str:
        if self._desktop is not None:
            return self._desktop(event.title, event.message)
        from arena_ls.platform_notify import notify_desktop

        return notify_desktop(event.title, event.message)

    def _channel(self, name: str, send: Callable[[], str]) -> None:
        try:
            how = send()
        except Exception as error:  # a notification never fails a run
            self._failure(name, str(error) or type(error).__name__)
            return
        log.info("%s sent: %s", name, how)

    def _failure(self, name: str, why: str) -> None:
        log.warning("%s failed: %s", name, why)
        if name in self._failed:
            return
        self._failed.add(name)
        try:
            self.tell(agent_records.note(f"{name} failed: {why}"))
        except Exception as error:  # the log is closed or full: agent.log has it
            log.warning("could not record it in the run's log: %s", error)


class CommandFailed(Exception):
    """``notify.command`` could not run, failed or timed out; ``str()`` says which."""


def run_command(argv: Sequence[str], payload: dict[str, Any], timeout: float) -> str:
    """Run ``argv`` with ``payload`` as one JSON line on stdin; kill its tree past ``timeout``."""
    data = (json.dumps(payload, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    with tempfile.TemporaryFile() as stderr:
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                **_own_group(),
            )
        except OSError as error:
            raise CommandFailed(f"cannot run {argv[0]}: {error}") from error
        try:
            process.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            platform.kill_tree(process.pid, timeout=5.0, own_child=True)
            process.wait()
            raise CommandFailed(f"{argv[0]} did not finish in {timeout:g}s: killed") from None
        except BrokenPipeError:  # it exited without reading: its exit status says how it went
            process.wait()
        if process.returncode != 0:
            stderr.seek(0)
            said = stderr.read().decode("utf-8", "replace").strip()[-STDERR_KEPT:]
            raise CommandFailed(
                f"{argv[0]} exited with status {process.returncode}" + (f": {said}" if said else "")
            )
    return f"{argv[0]} (exit status 0)"


def _own_group() -> dict[str, Any]:
    """A process group of its own (a console-less one on Windows), so its whole tree can be killed."""
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP | platform.CREATE_NO_WINDOW}
    return {"start_new_session": True}
