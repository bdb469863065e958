"""Which happenings of a run are told to the person (contract 8.3), decided from its recorded state.

Pure: ``NotifyTracker.observe`` reads each state the agent writes (the
``state.json`` payload, camelCase) and returns the events it has not told
yet, each with a ``key`` that names it for good. The agent records every key
it tells in the run's log (``notified`` records, ``agent_records``), and a
tracker built from those keys never tells them again: each event once.

The events and their JSON fields are docs/protocol.md's ("Notifications of
the job agent"):

- ``ended``: the run has a final status (``key`` ``ended``); when the person
  has a decision to make (a refused or unknown resume, a crash loop, a lost
  agent) ``question`` says which.
- ``relaunched``: the watchdog's relaunch has run (``relaunched:N``, N the
  run's relaunch count): told at its first ``running`` state, or, where no
  written state showed it, as soon as a later one proves it ran.
- ``battery-stop``: the run was stopped for battery and waits for power
  (``battery-stop:N``, the Nth such stop); one that ends the run is ``ended``
  with ``stoppedBy`` ``battery``.
- ``waiting``: a relaunch is held by failing pre-flight checks
  (``waitingFor``), a person's to fix (``waiting:R:N``: the Nth wait of
  relaunch R).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs

from arena_ls.run.rundir import NotifySpec
from arena_ls.settings import Settings
from arena_ls.timeutil import iso_utc

ENDED, RELAUNCHED, BATTERY_STOP, WAITING = "ended", "relaunched", "battery-stop", "waiting"
FINAL = ("stopped", "succeeded", "crashed", "lost")
QUESTIONS = {
    "resume-refused": "the trainer refused to resume: check its checkpoint, then start it again",
    "resume-unknown": "a saved file exists but no checkpoint step is known for it: start with a step,"
    " or anew",
    "crash-loop": "it crashed again right after a relaunch: look at the log before starting it again",
    "machine-restarted": "the machine restarted under it: resume it from its last checkpoint?",
}
"""What the person is asked after a run that ended with these failure kinds."""


def notify_spec(settings: Settings) -> NotifySpec:
    """The run's ``notify`` spec, from the settings at its start."""
    command = settings.notify.command
    return NotifySpec(desktop=settings.notify.desktop, command=list(command) if command else None)


@attrs.frozen
class NotifyEvent:
    """One happening to tell: ``payload`` is the JSON object ``notify.command`` reads on stdin."""

    key: str
    payload: dict[str, Any]

    @property
    def title(self) -> str:
        return str(self.payload["title"])

    @property
    def message(self) -> str:
        return str(self.payload["message"])


@attrs.define
class NotifyTracker:
    """The events of one run so far; ``told`` holds the keys already told (from the run's log)."""

    run_id: str
    job_name: str
    log_path: str
    told: set[str] = attrs.field(factory=set)
    _battery_stops: int = 0
    _in_battery_stop: bool = False
    _waits: dict[int, int] = attrs.field(factory=dict)
    _in_wait: bool = False

    def observe(self, state: Mapping[str, Any]) -> list[NotifyEvent]:
        """The events this state shows that were not told yet (now counted as told)."""
        found = [key_kind for key_kind in self._happenings(state) if key_kind[0] not in self.told]
        self.told.update(key for key, _ in found)
        return [NotifyEvent(key, self._payload(kind, key, state)) for key, kind in found]

    def _happenings(self, state: Mapping[str, Any]) -> list[tuple[str, str]]:
        status = _status(state)
        restarts = _int(state.get("restarts")) or 0
        battery = state.get("stoppedBy") == "battery"
        happenings: list[tuple[str, str]] = []
        happenings.extend(
            (f"{RELAUNCHED}:{n}", RELAUNCHED) for n in range(1, _relaunches_run(status, restarts) + 1)
        )
        if status in FINAL:
            happenings.append((ENDED, ENDED))
        paused = status == "restarting" and battery
        if paused and not self._in_battery_stop:
            self._battery_stops += 1
        self._in_battery_stop = paused
        if paused:
            happenings.append((f"{BATTERY_STOP}:{self._battery_stops}", BATTERY_STOP))
        waiting = status == "restarting" and not battery and bool(state.get("waitingFor"))
        if waiting and not self._in_wait:
            self._waits[restarts] = self._waits.get(restarts, 0) + 1
        self._in_wait = waiting
        if waiting:
            happenings.append((f"{WAITING}:{restarts}:{self._waits[restarts]}", WAITING))
        return happenings

    def _payload(self, kind: str, key: str, state: Mapping[str, Any]) -> dict[str, Any]:
        checkpoint = state.get("lastCheckpoint")
        last = (
            {"step": checkpoint.get("step"), "path": checkpoint.get("path")}
            if isinstance(checkpoint, Mapping)
            else None
        )
        failure = state.get("failure")
        failure_kind = failure.get("kind") if isinstance(failure, Mapping) else None
        payload: dict[str, Any] = {
            "event": kind,
            "key": key,
            "runId": self.run_id,
            "jobId": state.get("jobId"),
            "jobName": self.job_name,
            "status": _status(state),
            "outcome": _outcome(kind, state),
            "step": _int(state.get("step")),
            "totalSteps": _int(state.get("totalSteps")),
            "loss": _float(state.get("loss")),
            "lastCheckpoint": last,
            "restarts": _int(state.get("restarts")) or 0,
            "failure": {"kind": failure_kind, "evidence": failure.get("evidence")}
            if isinstance(failure, Mapping)
            else None,
            "stoppedBy": state.get("stoppedBy"),
            "waitingFor": state.get("waitingFor") if kind in (WAITING, BATTERY_STOP) else None,
            "question": _question(kind, state, failure_kind),
            "logPath": self.log_path,
            "at": iso_utc(time.time()),
        }
        payload["title"] = f"{self.job_name}: {payload['outcome']}"
        payload["message"] = message(payload)
        return payload


def _relaunches_run(status: Any, restarts: int) -> int:
    """How many of the run's relaunches have certainly run by this state.

    Every relaunch before the current one ran (a later crash came from it); the
    current one ran once the run is ``running`` or ``stopping`` again, or
    ``succeeded``. So a relaunch whose ``running`` no written state showed (its
    writes folded into the next on a busy machine) is still told, late,
    before the end."""
    current_ran = status in ("running", "stopping", "succeeded")
    return restarts if current_ran else max(restarts - 1, 0)


def _outcome(kind: str, state: Mapping[str, Any]) -> str:
    """A word or two for the title: the final status, or what happened."""
    if kind == ENDED:
        if state.get("stoppedBy") == "battery":
            return "stopped for battery"
        return str(_status(state))
    return {RELAUNCHED: "relaunched", BATTERY_STOP: "stopped for battery", WAITING: "waiting"}[kind]


def _question(kind: str, state: Mapping[str, Any], failure_kind: Any) -> str | None:
    """What the person must decide; None when nothing."""
    if kind == WAITING:
        checks = state.get("waitingFor") or []
        names = ", ".join(str(c.get("name")) for c in checks if isinstance(c, Mapping))
        return f"the relaunch waits until these checks pass: {names}"
    if kind == BATTERY_STOP:
        return "plug the machine in: the run resumes when power returns"
    if kind == ENDED and isinstance(failure_kind, str):
        return QUESTIONS.get(failure_kind)
    if kind == ENDED and _status(state) == "lost":
        return "its job agent is gone: look at the log before starting it again"
    return None


def message(payload: Mapping[str, Any]) -> str:
    """The notification's body: the step, the loss, the last checkpoint, and any question."""
    parts: list[str] = []
    step, total = payload.get("step"), payload.get("totalSteps")
    if step is not None:
        parts.append(f"step {step}" + (f"/{total}" if total is not None else ""))
    if payload.get("loss") is not None:
        parts.append(f"loss {payload['loss']:.4g}")
    checkpoint = payload.get("lastCheckpoint")
    parts.append(f"last checkpoint: step {checkpoint['step']}" if checkpoint else "no checkpoint yet")
    failure = payload.get("failure")
    if payload.get("event") == ENDED and failure:
        parts.append(f"failure: {failure['kind']}")
    if payload.get("event") == RELAUNCHED:
        parts.append(f"relaunch {payload.get('restarts')}")
    text = ", ".join(parts)
    question = payload.get("question")
    return f"{text}. {question[0].upper()}{question[1:]}." if question else text


def _status(state: Mapping[str, Any]) -> Any:
    """The status as its plain word (the agent's payload holds the ``RunStatus`` itself)."""
    status = state.get("status")
    return getattr(status, "value", status)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None
