"""What an agent tells the servers, as typed records on the ``arena`` stream of a run's capture.

An agent (``agent/local/agent.py``, ``cluster/agent.py``) writes each of its own
lines as one JSON record, ``{"supervisor": 1, "kind": ..., fields...}``, with
``encode``. Readers (the run view, insights, metrics, a new cluster agent)
call ``parse`` on a line of the ``arena`` stream and act on ``kind`` and the
fields, never on words. What a person reads (``arena/log``, ``arena logs``,
``window/logMessage``) is ``render``: the same words the agents wrote as
plain text before (contract 2: ``TRAINING_CRASHED: tiny-lm code -9``,
``restarting from step 500 (attempt 1/3) in 5s``).

Runs written by earlier agents hold those plain lines. ``parse`` reads them
too (``legacy``): the few lines a reader acts on (a launch, a crash, a
relaunch, a warning, a submission) are recognised by their fixed wording,
here and nowhere else, and render as exactly the text they were. Any other
text (an earlier agent's note, a line a later one writes plainly) is a
``note`` that renders as itself.

Standard library only: the agent's entry point (``trainer_start``) writes the
first ``starting`` record before the agent's heavier imports are loaded.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from typing import Any

VERSION = 1
MARK = '{"supervisor":'
"""How every record's line begins (``encode`` writes the version key first)."""
MARK_BYTES = MARK.encode()


class Kind(str, enum.Enum):
    """What a record says. Its fields are listed with each kind."""

    STARTING = "starting"
    """A launch (or a submission): ``job``, ``argv``."""
    EXITED = "exited"
    """The trainer ended: ``code`` (None when killed), ``signal``."""
    CRASHED = "crashed"
    """The trainer failed (``TRAINING_CRASHED``): ``job``, ``code`` (the raw exit status), ``signal``."""
    FAILURE = "failure"
    """The failure class of a crash: ``failure``, ``evidence``; ``final``: the relaunch policy
    stops here (``resume-refused``, ``resume-unknown``: not relaunching)."""
    RESTARTING = "restarting"
    """The watchdog relaunches: ``step`` (None: from scratch), ``attempt``, ``budget``, ``delay``."""
    GAVE_UP = "gave-up"
    """A crash loop: no further relaunch; ``evidence``."""
    WARNING = "warning"
    """Something the person should see: ``text``."""
    STOPPED = "stopped"
    """Ended by a stop: ``by`` (``file``, ``signal``, ``kill``, ``battery``)."""
    FINISHED = "finished"
    """The trainer finished by itself: ``job``."""
    ENDED = "ended"
    """The run's final status: ``status``."""
    SUBMITTING = "submitting"
    """A cluster submission begins (its lines follow): ``cluster``, ``sid``."""
    NOTE = "note"
    """Any other line of the supervisor's own: ``text``."""
    NOTIFIED = "notified"
    """The person was told of an event (contract 8.3): ``key`` (the event's, told once), ``text``."""

    ROLLBACK = "rollback"
    """A loss-spike rollback (contract 8.2): ``spike`` (its step), ``step`` (the checkpoint resumed
    from), ``skip`` (batches skipped), ``attempt`` (the run's n-th), ``budget`` (``rollbackMax``)."""


_FIELDS = ("job", "argv", "code", "signal", "failure", "evidence", "final", "step", "attempt", "budget",
           "delay", "by", "status", "cluster", "sid", "text", "key", "spike", "skip")  # fmt: skip


class AgentRecord:
    """One record of the supervisor's own. Build it with the constructors below."""

    __slots__ = ("fields", "kind", "legacy")

    def __init__(
        self, kind: Kind, fields: Mapping[str, Any] | None = None, legacy: str | None = None
    ) -> None:
        self.kind = kind
        self.fields: dict[str, Any] = {k: v for k, v in (fields or {}).items() if v is not None}
        self.legacy = legacy
        """The plain line an earlier agent wrote (its text is what renders), else None."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AgentRecord):
            return NotImplemented
        return (self.kind, self.fields, self.legacy) == (other.kind, other.fields, other.legacy)

    def __hash__(self) -> int:
        return hash((self.kind, self.legacy, json.dumps(self.fields, sort_keys=True, default=str)))

    def __repr__(self) -> str:
        return f"AgentRecord({self.kind.value}, {self.fields!r}, legacy={self.legacy!r})"

    # -- typed access ------------------------------------------------------------------------

    def text_field(self, name: str) -> str | None:
        value = self.fields.get(name)
        return value if isinstance(value, str) else None

    def int_field(self, name: str) -> int | None:
        value = self.fields.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def step(self) -> int | None:
        """``restarting``: the step the relaunch resumes from (None: from scratch)."""
        return self.int_field("step")

    @property
    def is_launch(self) -> bool:
        """A launch of the trainer (the run's speed and observations start again)."""
        return self.kind is Kind.STARTING

    @property
    def is_relaunch(self) -> bool:
        """The watchdog relaunches: from here the run is back at ``step`` (0 from scratch)."""
        return self.kind is Kind.RESTARTING

    @property
    def is_rollback(self) -> bool:
        """A loss-spike rollback: from here the run is back at ``step``."""
        return self.kind is Kind.ROLLBACK

    @property
    def is_warning(self) -> bool:
        """Shown as a warning (``window/logMessage`` type 2): a warning or a crash."""
        return self.kind in (Kind.WARNING, Kind.CRASHED)

    # -- the words -----------------------------------------------------------------------------

    def render(self) -> str:
        """The line a person reads (the words the agents always wrote)."""
        if self.legacy is not None:
            return self.legacy
        renderer = _RENDERERS.get(self.kind)
        return renderer(self) if renderer is not None else self.text_field("text") or self.kind.value

    def encode(self) -> str:
        """The record's line: ``{"supervisor": 1, "kind": ..., ...}`` (one line: JSON escapes newlines)."""
        body = {"supervisor": VERSION, "kind": self.kind.value, **self.fields}
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)

    def encode_lines(self) -> str:
        """What an agent writes: ``encode``, except that a note or warning whose text has lines
        inside (an error page a cluster answered with) is a record a line, as a plain line with
        newlines always was that many lines (the first keeps the kind, the rest are notes)."""
        text = self.text_field("text")
        if self.kind not in (Kind.NOTE, Kind.WARNING) or text is None or "\n" not in text.rstrip("\n"):
            return self.encode()
        first, *rest = text.rstrip("\n").split("\n")
        records = [AgentRecord(self.kind, {"text": first}), *(note(line) for line in rest)]
        return "\n".join(record.encode() for record in records)


# -- constructors (what the agents say) ---------------------------------------------------------


def starting(job: str, argv: list[str]) -> AgentRecord:
    return AgentRecord(Kind.STARTING, {"job": job, "argv": list(argv)})


def exited(code: int | None, signal: str | None) -> AgentRecord:
    return AgentRecord(Kind.EXITED, {"code": code, "signal": signal})


def crashed(job: str, code: int | None, signal: str | None) -> AgentRecord:
    """``code``: the exit status as the trainer's wait reported it (a signal's negative number)."""
    return AgentRecord(Kind.CRASHED, {"job": job, "code": code, "signal": signal})


def failure(kind: str, evidence: str, final: bool = False) -> AgentRecord:
    return AgentRecord(Kind.FAILURE, {"failure": kind, "evidence": evidence, "final": final or None})


def restarting(step: int | None, attempt: int, budget: int, delay: float) -> AgentRecord:
    return AgentRecord(Kind.RESTARTING, {"step": step, "attempt": attempt, "budget": budget, "delay": delay})


def gave_up(evidence: str) -> AgentRecord:
    return AgentRecord(Kind.GAVE_UP, {"evidence": evidence})


def warning(text: str) -> AgentRecord:
    return AgentRecord(Kind.WARNING, {"text": text})


def stopped(by: str) -> AgentRecord:
    return AgentRecord(Kind.STOPPED, {"by": by})


def finished(job: str) -> AgentRecord:
    return AgentRecord(Kind.FINISHED, {"job": job})


def ended(status: str) -> AgentRecord:
    return AgentRecord(Kind.ENDED, {"status": status})


def submitting(cluster: str, sid: str) -> AgentRecord:
    return AgentRecord(Kind.SUBMITTING, {"cluster": cluster, "sid": sid})


def rollback(spike: int, step: int, skip: int, attempt: int, budget: int) -> AgentRecord:
    return AgentRecord(
        Kind.ROLLBACK, {"spike": spike, "step": step, "skip": skip, "attempt": attempt, "budget": budget}
    )


def note(text: str) -> AgentRecord:
    return AgentRecord(Kind.NOTE, {"text": text})


def notified(key: str, text: str) -> AgentRecord:
    return AgentRecord(Kind.NOTIFIED, {"key": key, "text": text})


# -- rendering --------------------------------------------------------------------------------


def _code_words(event: AgentRecord) -> str:
    return code_words(event.int_field("code"), event.text_field("signal"))


def code_words(code: int | None, signal: str | None) -> str:
    """How a crash's exit status is worded: ``code -9``, ``signal SIGX``, ``with no exit status``."""
    if code is not None:
        return f"code {code}"
    return f"signal {signal}" if signal is not None else "with no exit status"


def _render_restarting(event: AgentRecord) -> str:
    step = event.step
    where = f"from step {step}" if step is not None else "from scratch (no checkpoint yet)"
    delay = event.fields.get("delay", 0)
    delay = float(delay) if isinstance(delay, (int, float)) and not isinstance(delay, bool) else 0.0
    return (
        f"restarting {where} (attempt {event.int_field('attempt')}/{event.int_field('budget')}) in {delay:g}s"
    )


def _render_failure(event: AgentRecord) -> str:
    text = f"failure: {event.text_field('failure')}: {event.text_field('evidence')}"
    return text + "; not relaunching" if event.fields.get("final") else text


def _render_starting(event: AgentRecord) -> str:
    argv = event.fields.get("argv")
    words = " ".join(str(a) for a in argv) if isinstance(argv, list) else ""
    return f"starting {event.text_field('job')}: {words}"


def _render_exited(event: AgentRecord) -> str:
    signal = event.text_field("signal")
    return (
        f"job was killed by {signal}"
        if signal is not None
        else f"job exited with code {event.int_field('code')}"
    )


_RENDERERS: dict[Kind, Any] = {
    Kind.STARTING: lambda e: (
        f"starting {e.text_field('job')}: {' '.join(str(a) for a in e.fields.get('argv') or [])}"
    ),
    Kind.EXITED: _render_exited,
    Kind.CRASHED: lambda e: f"TRAINING_CRASHED: {e.text_field('job')} {_code_words(e)}",
    Kind.FAILURE: _render_failure,
    Kind.RESTARTING: _render_restarting,
    Kind.GAVE_UP: lambda e: f"crash loop: {e.text_field('evidence')}; not relaunching",
    Kind.WARNING: lambda e: f"warning: {e.text_field('text')}",
    Kind.STOPPED: lambda e: f"stopped (by {e.text_field('by')})",
    Kind.FINISHED: lambda e: f"{e.text_field('job')} finished",
    Kind.ENDED: lambda e: f"run ended: {e.text_field('status')}",
    Kind.SUBMITTING: lambda e: f"submitting to cluster {e.text_field('cluster')} as {e.text_field('sid')}",
    Kind.NOTE: lambda e: e.text_field("text") or "",
    Kind.NOTIFIED: lambda e: f"notified: {e.text_field('text')}",
    Kind.ROLLBACK: lambda e: (
        f"rolling back: loss spike at step {e.int_field('spike')}; resuming from step {e.step}, "
        f"skipping {e.int_field('skip')} batches (rollback {e.int_field('attempt')}/{e.int_field('budget')})"
    ),
}


def render(text: str) -> str:
    """The words of one ``arena`` line as stored (a record, or an earlier agent's plain line)."""
    return parse(text).render()


# -- reading ----------------------------------------------------------------------------------


def parse(text: str) -> AgentRecord:
    """The event of one ``arena`` line: a record, else an earlier agent's plain line (``legacy``)."""
    if text.startswith(MARK):
        event = _from_record(text)
        if event is not None:
            return event
    return legacy(text)


def parse_bytes(raw: bytes) -> AgentRecord:
    return parse(raw.rstrip(b"\r").decode("utf-8", "replace"))


def might_be_relaunch(data: bytes) -> bool:
    """A cheap look at a raw record: False when none of its lines can be a ``restarting`` (or a
    ``rollback``) one."""
    return b"restarting" in data or b'"rollback"' in data


def _from_record(text: str) -> AgentRecord | None:
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("kind"), str):
        return None
    try:
        kind = Kind(body["kind"])
    except ValueError:  # a later agent's kind: its words, if it gave them, else a note of its own
        return AgentRecord(Kind.NOTE, {"text": _unknown_words(body)})
    return AgentRecord(kind, {name: body[name] for name in _FIELDS if name in body})


def _unknown_words(body: dict[str, Any]) -> str:
    text = body.get("text")
    return text if isinstance(text, str) else json.dumps(body, ensure_ascii=False)


_LEGACY_STARTING = re.compile(r"starting (\S+): (.*)\Z", re.S)
_LEGACY_RESTARTING = re.compile(r"restarting (?:from step (\d{1,30})|from scratch)")
_LEGACY_CRASHED = re.compile(
    r"TRAINING_CRASHED: (\S+) (?:code (-?\d{1,30})|signal (\S+)|with no exit status)"
)
_LEGACY_SUBMITTING = re.compile(r"submitting to cluster (\S+) as (\S+)\Z")


def legacy(text: str) -> AgentRecord:
    """A plain line of an earlier agent: the kinds readers act on are recognised; it renders as itself."""
    kind, fields = Kind.NOTE, {}
    if found := _LEGACY_STARTING.match(text):
        kind, fields = Kind.STARTING, {"job": found.group(1), "argv": found.group(2).split(" ")}
    elif found := _LEGACY_RESTARTING.match(text):
        kind, fields = Kind.RESTARTING, {"step": int(found.group(1)) if found.group(1) else None}
    elif found := _LEGACY_CRASHED.match(text):
        code = int(found.group(2)) if found.group(2) else None
        kind, fields = Kind.CRASHED, {"job": found.group(1), "code": code, "signal": found.group(3)}
    elif text.startswith("warning"):
        kind, fields = Kind.WARNING, {"text": text.removeprefix("warning").removeprefix(": ")}
    elif found := _LEGACY_SUBMITTING.match(text):
        kind, fields = Kind.SUBMITTING, {"cluster": found.group(1), "sid": found.group(2)}
    return AgentRecord(kind, fields, legacy=text)
