"""What the server warns of before it would lose work, put to the person in words.

Three refusals are questions, not errors (contract 4.3 and 7.1): ``1012
already-finished`` (the job trained all its steps: start over from step 0?),
``1011 checkpoint-mismatch`` (the step asked for is not the job's last
checkpoint: start there anyway?) and ``1007 no-checkpoint`` (stopping now
loses the work since the last checkpoint, or all of it: stop anyway?). On a
terminal the client asks and, on yes, sends the request again with what the
person agreed to; elsewhere it prints the warning and the command that does it
without asking, and exits 1. Also here: the words for a stopped run's ``lost``
(``killed at step 390; last checkpoint 300: 90 steps (4 min) lost``).

Pure: the clock is passed in, nothing is printed or read here.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

import attrs

from arena_ls.client.lspclient import JsonRpcError

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


def parse_time(text: Any) -> _dt.datetime | None:
    """An ISO 8601 time from the wire (``2026-12-01T15:04:05.123Z``), else None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.timezone.utc)


def fmt_span(seconds: Any) -> str:
    """A span of work in words a person reads at a glance: ``45 s``, ``4 min``, ``2 h 05 min``."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "?"
    total = max(0, round(seconds))
    if total < 60:
        return f"{total} s"
    minutes = round(total / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def fmt_age(at: Any, now: _dt.datetime) -> str:
    """``3 h 05 min ago`` of a wire time, or ``at an unknown time``."""
    moment = parse_time(at)
    if moment is None:
        return "at an unknown time"
    return f"{fmt_span((now - moment).total_seconds())} ago"


def fmt_when(at: Any, now: _dt.datetime) -> str:
    """``2026-12-01 15:04 UTC, 12 min ago`` of a wire time."""
    moment = parse_time(at)
    if moment is None:
        return "at an unknown time"
    utc = moment.astimezone(_dt.timezone.utc)
    return f"{utc:%Y-%m-%d %H:%M} UTC, {fmt_age(at, now)}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def checkpoint_words(checkpoint: Any, now: _dt.datetime) -> str:
    """``step 600 (checkpoints/ckpt.pt, saved 3 h 05 min ago by run r-1)``."""
    if not isinstance(checkpoint, dict):
        return "no checkpoint"
    details = [str(checkpoint["path"])] if checkpoint.get("path") else []
    saved = f"saved {fmt_age(checkpoint.get('at'), now)}"
    if checkpoint.get("runId"):
        saved += f" by run {checkpoint['runId']}"
    details.append(saved)
    return f"step {checkpoint.get('step')} ({', '.join(details)})"


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
    run = run if isinstance(run, dict) else {}
    steps = run.get("totalSteps") or run.get("step")
    what = f"trained all {steps} steps" if steps is not None else "trained all its steps"
    by = f" in run {run['runId']}" if run.get("runId") else ""
    warning = f"job {job} is finished: it {what}{by} (ended {fmt_when(run.get('endedAt'), now)})"
    return Question(
        warning=warning,
        question="Start over from step 0 (a new run; the finished checkpoint is overwritten)?",
        retry={"resume": False},
        command=f"arena start {job} --fresh",
        drop=("startStep",),
    )


def mismatch_question(job: str, data: dict[str, Any], now: _dt.datetime) -> Question:
    """``1011``: the step asked for against the job's last checkpoint, with its age."""
    asked = data.get("asked")
    last = data.get("lastCheckpoint")
    last_step = last.get("step") if isinstance(last, dict) else None
    warning = (
        f"job {job}: you asked to start at step {asked}, but its last checkpoint is "
        f"{checkpoint_words(last, now)}"
    )
    if last_step is not None:
        warning += f"; `arena start {job}` resumes from step {last_step}"
    return Question(
        warning=warning,
        question=f"Start at step {asked} anyway?",
        retry={"confirm": True},
        command=f"arena start {job} --start-step {asked} --confirm",
    )


def stop_question(error: JsonRpcError, params: dict[str, Any], now: _dt.datetime) -> Question | None:
    """``1007``: stopping loses the work since the last checkpoint (or all of it)."""
    if error.code != NO_CHECKPOINT:
        return None
    data = _data(error)
    job = params.get("id")
    flags = " --kill" if params.get("kill") else ""
    command = f"arena stop{' ' + str(job) if job else ''}{flags} --confirm"
    return Question(
        warning=stop_loss_words(error.message, data, now),
        question="Stop it anyway?",
        retry={"confirm": True},
        command=command,
    )


def stop_loss_words(message: str, data: dict[str, Any], now: _dt.datetime) -> str:
    """What stopping now loses: the steps since an old checkpoint (``lost`` and
    ``lastCheckpoint`` in the refusal's data), else the whole run's training."""
    head = " ".join(str(message).split()).split(":", 1)[0]
    lost = data.get("lost")
    last = data.get("lastCheckpoint")
    if isinstance(lost, dict) and isinstance(last, dict):
        return (
            f"the run's last checkpoint is {checkpoint_words(last, now)}; "
            f"stopping it now loses {lost_amount(lost)} of training"
        )
    runtime = data.get("runtimeSeconds")
    if isinstance(runtime, (int, float)) and not isinstance(runtime, bool) and math.isfinite(runtime):
        minutes = max(0.1, runtime / 60) if runtime > 0 else 0.0
        return f"{head}: stopping it now loses {minutes:.1f} min ({runtime:.0f}s) of training"
    return f"{head}: stopping it now loses all its training"


def lost_amount(lost: dict[str, Any]) -> str:
    """``90 steps (4 min)``, or ``4 min`` when the steps are not known (``steps`` null)."""
    steps = _int(lost.get("steps"))
    span = fmt_span(lost.get("seconds"))
    return span if steps is None else f"{steps} step{'' if steps == 1 else 's'} ({span})"


STOP_VERBS = {"kill": "killed", "battery": "stopped on battery"}


def lost_line(info: dict[str, Any]) -> str | None:
    """``killed at step 390; last checkpoint 300: 90 steps (4 min) lost`` from a stopped run's
    ``lost``; None when the run says nothing of it (``lost`` null or absent)."""
    lost = info.get("lost")
    if not isinstance(lost, dict):
        return None
    verb = STOP_VERBS.get(str(info.get("stoppedBy")), "stopped")
    checkpoint = info.get("lastCheckpoint")
    last = checkpoint.get("step") if isinstance(checkpoint, dict) else None
    where = f"{verb} at step {info.get('step')}" if info.get("step") is not None else verb
    if _int(lost.get("steps")) == 0:
        saved = f" (checkpoint at step {last})" if last is not None else ""
        return f"{where}; nothing lost{saved}"
    since = f"last checkpoint {last}" if last is not None else "no checkpoint"
    return f"{where}; {since}: {lost_amount(lost)} lost"
