"""A debug record of what the event loop's thread does from ``initialized`` on (issue 38 item 7).

Off unless ``ARENA_LOOP_AUDIT`` names a file. Then every audit event
(``sys.addaudithook``) of the kinds in ``EVENTS`` that the event loop's
thread raises from ``initialized`` on is written to that file, one JSON
object a line (``{"event": "open", "arg": "/proc/meminfo"}``): the
modules it imports, the processes it starts, the files it opens and the
folders it lists. A line ``{"event": "first-status-answered"}`` marks the
moment the session's first ``arena/status`` was answered.

Tests read it to pin what the first status waits for: no module imported
and no process started on the loop, and a bounded number of files read
there whatever the size of the manifest (``tests/attacks/test_first_status.py``).
Python's audit hooks cannot be removed, so the hook is only installed when
the variable is set; it costs one comparison of the thread per event.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import IO, Any

VARIABLE = "ARENA_LOOP_AUDIT"
EVENTS = frozenset(
    {
        "import",
        "open",
        "os.listdir",
        "os.scandir",
        "subprocess.Popen",
        "os.posix_spawn",
        "os.fork",
        "os.exec",
    }
)
"""The audit events recorded (``stat`` raises none)."""
FIRST_STATUS = "first-status-answered"

_report: IO[str] | None = None
_thread: int | None = None
_first_status_seen = False


def begin() -> None:
    """Start recording this thread's events (the server calls it at ``initialized``), once."""
    global _report, _thread
    path = os.environ.get(VARIABLE)
    if not path or _report is not None:
        return
    _report = open(path, "a", encoding="utf-8")  # noqa: SIM115 (kept open while the process lives)
    _thread = threading.get_ident()
    sys.addaudithook(_hear)


def first_status_answered() -> None:
    """Mark the first ``arena/status`` answer (later ones are not marked)."""
    global _first_status_seen
    if _report is None or _first_status_seen:
        return
    _first_status_seen = True
    _write({"event": FIRST_STATUS})


def _hear(event: str, args: tuple[Any, ...]) -> None:
    if event not in EVENTS or threading.get_ident() != _thread or _report is None:
        return
    _write({"event": event, "arg": str(args[0])[:300] if args else ""})


def _write(line: dict[str, str]) -> None:
    report = _report
    if report is None:
        return
    report.write(json.dumps(line) + "\n")
    report.flush()
