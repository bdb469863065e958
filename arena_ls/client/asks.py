"""What the server warns of before it would lose work, put to the person in words.

Three refusals are questions, not errors (contract 4.3 and 7.1): ``1012
already-finished`` (the job trained all its steps: start over from step 0?),
``1011 checkpoint-mismatch`` (the step asked for is not the job's last
checkpoint: start there anyway?) and ``1007 no-checkpoint`` (stopping now
loses the work since the last checkpoint, or all of it: stop anyway?). On a
terminal the client asks and, on yes, sends the request again with what the
person agreed to; elsewhere it prints the warning and the command that does it
without asking, and exits 1. The words themselves are ``arena_ls.wording``'s, the
same in every client (the terminal says ```arena start JOB``` where an editor says
"A plain start"); the span and stopped-run helpers are re-exported from there.

Pure: the clock is passed in, nothing is printed or read here.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

import attrs

from arena_ls.client.lspclient import JsonRpcError
from arena_ls.wording import (
    checkpoint_words,
    finished_words,
    fmt_age,
    fmt_span,
    fmt_when,
    lost_amount,
    lost_line,
    mismatch_words,
    parse_time,
    say,
    scalar,
    stop_words,
)

__all__ = [
    "ALREADY_FINISHED",
    "CHECKPOINT_MISMATCH",
    "NO_CHECKPOINT",
    "Question",
    "checkpoint_words",
    "finished_question",
    "fmt_age",
    "fmt_span",
    "fmt_when",
    "lost_amount",
    "lost_line",
    "mismatch_question",
    "parse_time",
    "start_question",
    "stop_question",
]

NO_CHECKPOINT = 1007
CHECKPOINT_MISMATCH = 1011
ALREADY_FINISHED = 1012


@attrs.frozen
class Question:
    """A refusal the person may overrule: what it warns of, what to ask, and how to say yes."""

    warning: str
    """What would be lost or overwritten, in words (one line)."""
    question: str
    """The yes/no question (``Start over from step 0?``)."""
    retry: dict[str, Any]
    """The params that say yes, to merge into the refused request."""
    command: str
    """The command line that says yes without being asked (``arena start tiny-lm --fresh``)."""
    drop: tuple[str, ...] = ()
    """Params to leave out of the retried request (a fresh start names no step)."""

    def retried(self, params: dict[str, Any]) -> dict[str, Any]:
        kept = {key: value for key, value in params.items() if key not in self.drop}
        return {**kept, **self.retry}

    def refusal(self) -> str:
        """The line printed where no one can be asked."""
        return f"{self.warning}; to do it anyway: {self.command}"


def _data(error: JsonRpcError) -> dict[str, Any]:
    return error.data if isinstance(error.data, dict) else {}


def start_question(error: JsonRpcError, params: dict[str, Any], now: _dt.datetime) -> Question | None:
    """The question a refused ``arena/start`` puts to the person, or None for a plain refusal."""
    job = str(params.get("id"))
    data = _data(error)
    if error.code == ALREADY_FINISHED:
        return finished_question(job, data.get("run"), now)
    if error.code == CHECKPOINT_MISMATCH:
        return mismatch_question(job, data, now)
    return None


def finished_question(job: str, run: Any, now: _dt.datetime) -> Question:
    """``1012``: say the job is finished (its step, when) and offer a fresh start."""
    return Question(
        warning=finished_words(job, run, now),
        question=say("finishedQuestion"),
        retry={"resume": False},
        command=f"arena start {job} --fresh",
        drop=("startStep",),
    )


def mismatch_question(job: str, data: dict[str, Any], now: _dt.datetime) -> Question:
    """``1011``: the step asked for against the job's last checkpoint, with its age."""
    asked = data.get("asked")
    return Question(
        warning=mismatch_words(job, data, now, start=f"`arena start {job}`"),
        question=say("mismatchQuestion", asked=scalar(asked)),
        retry={"confirm": True},
        command=f"arena start {job} --start-step {asked} --confirm",
    )


def stop_question(error: JsonRpcError, params: dict[str, Any], now: _dt.datetime) -> Question | None:
    """``1007``: stopping loses the work since the last checkpoint (or all of it)."""
    if error.code != NO_CHECKPOINT:
        return None
    job = params.get("id")
    flags = " --kill" if params.get("kill") else ""
    command = f"arena stop{' ' + str(job) if job else ''}{flags} --confirm"
    return Question(
        warning=stop_words(_data(error), now),
        question=say("stopQuestion"),
        retry={"confirm": True},
        command=command,
    )
