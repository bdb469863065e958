"""Ray's job status and failure message, mapped onto a run's (pure functions)."""

from __future__ import annotations

import re

from arena_ls.run import agent_records
from arena_ls.run.states import RunStatus

PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED = "PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"
TERMINAL = frozenset({STOPPED, SUCCEEDED, FAILED})

_LIVE = {PENDING: RunStatus.STARTING, RUNNING: RunStatus.RUNNING}
_EXIT = re.compile(r"exit code (-?\d+)")
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM"}
"""The cluster's signals (Linux numbers), named the same on every laptop's platform."""
_NUMBERS = {name: number for number, name in _SIGNALS.items()}


def live_status(ray_status: str, stopping: bool) -> RunStatus | None:
    """Our status for a job Ray has not finished: PENDING → starting, RUNNING → running
    (``stopping`` while a stop is under way); None for a final or unknown Ray status."""
    status = _LIVE.get(ray_status)
    if status is RunStatus.RUNNING and stopping:
        return RunStatus.STOPPING
    return status


def final_status(ray_status: str, can_relaunch: bool) -> RunStatus | None:
    """Our status for a finished job: STOPPED → stopped, SUCCEEDED → succeeded, FAILED →
    restarting when the watchdog relaunches, else crashed; None while Ray has not finished."""
    if ray_status == STOPPED:
        return RunStatus.STOPPED
    if ray_status == SUCCEEDED:
        return RunStatus.SUCCEEDED
    if ray_status == FAILED:
        return RunStatus.RESTARTING if can_relaunch else RunStatus.CRASHED
    return None


def exit_of(message: str | None) -> tuple[int | None, str | None]:
    """``(exitCode, signal)`` from Ray's failure message (``... failed with exit code -9 ...``).

    A negative code is the signal that killed the entrypoint; (None, None) when
    the message names no exit code (the runtime environment failed, the node died)."""
    match = _EXIT.search(message or "")
    if match is None:
        return None, None
    code = int(match.group(1))
    if code < 0:
        return None, _SIGNALS.get(-code, f"SIG{-code}")
    return code, None


def exit_status(exit_code: int | None, signal_name: str | None) -> int | None:
    """The exit status a local run's ``crashed`` record carries: a signal's is its negative
    number (``-9``), the way the trainer's exit status reports it; None when Ray's message has
    none (its runtime environment failed, the node died) or the signal has no number."""
    if signal_name is None:
        return exit_code
    number = _NUMBERS.get(signal_name)
    if number is None and signal_name.startswith("SIG") and signal_name[3:].isdigit():
        number = int(signal_name[3:])
    return -number if number is not None else None


def code_text(exit_code: int | None, signal_name: str | None) -> str:
    """``code N`` of the ``crashed`` record's words (``TRAINING_CRASHED: tiny-lm code -9``)."""
    return agent_records.code_words(exit_status(exit_code, signal_name), signal_name)


def ended_text(exit_code: int | None, signal_name: str | None) -> str:
    """The words of the ``exited`` record (``job was killed by SIGKILL``)."""
    return agent_records.exited(exit_code, signal_name).render()


def first_line(message: str | None, limit: int = 300) -> str:
    """The first line of Ray's message (the rest repeats the log's tail), cut to ``limit``."""
    text = (message or "").strip().splitlines()
    line = text[0] if text else ""
    return line if len(line) <= limit else line[:limit] + "…"


def stopped_by(elapsed: float, wait_seconds: float) -> str:
    """``signal`` when the job ended within Ray's wait after its SIGTERM, else ``kill`` (Ray's SIGKILL)."""
    return "signal" if elapsed < wait_seconds else "kill"


def ended_at(info: dict[str, object], seen_at: float) -> float:
    """When Ray says the job ended (its ``end_time``, ms since the epoch), else when we saw it end.

    Ray's own time does not include our polling or a loaded machine's delay
    in answering, which would otherwise make a prompt stop look like a kill.
    """
    end_ms = info.get("end_time")
    if isinstance(end_ms, (int, float)) and not isinstance(end_ms, bool) and end_ms > 0:
        return min(float(end_ms) / 1000.0, seen_at)
    return seen_at
