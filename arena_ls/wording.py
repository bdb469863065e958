"""The words every client shows a person for the same event, written once.

The terminal client (``arena``), the VS Code extension, AIDE's Training Room
(which bundles the VS Code core) and the Neovim plugin all put the same
questions before work is lost or overwritten (contract 4.3, 7.1 and 7.3:
``1007 no-checkpoint``, ``1011 checkpoint-mismatch``, ``1012
already-finished``), say the same of a stopped run's ``lost``, of
``keepAwake`` and of a run a restart of the machine interrupted (8.3).

``TEXTS`` holds each text once, with ``{name}`` placeholders. The Python client
uses it directly (``say``); ``python -m arena_ls.wording_gen --write`` writes
the Node and Lua copies (``editor-client/vscode/src/core/wording.ts``, bundled
into AIDE's ``lib/core.mjs``, and ``editor-client/nvim/lua/arena/wording.lua``)
and ``tests/editor/fixtures/wording_cases.json``: what the functions below say
for a set of server answers, which each editor's unit tests compare with its
own functions, so the logic that picks and fills the texts agrees as well. CI
fails when a generated file drifts (``--check``).

Pure: the clock is passed in, nothing is printed or read here.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from typing import Any

TEXTS: dict[str, str] = {
    # Spans and times: `45 s`, `4 min`, `2 h 05 min`; `3 h 05 min ago`; `2026-12-01 15:04 UTC, 12 min ago`.
    "spanUnknown": "?",
    "spanSeconds": "{seconds} s",
    "spanUnderSecond": "less than 1 s",
    "spanMinutes": "{minutes} min",
    "spanHours": "{hours} h {minutes} min",
    "ago": "{span} ago",
    "unknownTime": "at an unknown time",
    "when": "{date} {time} UTC, {age}",
    # A checkpoint: `step 600 (checkpoints/ckpt.pt, saved 3 h 05 min ago by run r-1)`.
    "checkpoint": "step {step} ({details})",
    "checkpointSaved": "saved {age}",
    "checkpointSavedBy": "saved {age} by run {runId}",
    "noCheckpoint": "no checkpoint",
    # A question: what would be lost or overwritten, then what to answer.
    "prompt": "{warning}. {question}",
    # 1012 already-finished.
    "finished": "{job} is finished: it {what}{by} (ended {when})",
    "finishedSteps": "trained all {steps} steps",
    "finishedAllSteps": "trained all its steps",
    "finishedInRun": " in run {runId}",
    "finishedQuestion": "Start over from step 0? The new run overwrites its checkpoints.",
    # 1011 checkpoint-mismatch.
    "mismatch": "You asked to start {job} at step {asked}, but its last checkpoint is {checkpoint}",
    "mismatchResumes": "{start} resumes from step {step}",
    "mismatchPlainStart": "A plain start",
    "mismatchQuestion": "Start at step {asked} anyway?",
    # 1007 no-checkpoint: no checkpoint yet (the run's runtime is lost), or an old one (`lost`).
    "stopLoses": "This run has no checkpoint yet; stopping it now loses {span} of training",
    "stopLosesAll": "This run has no checkpoint yet; stopping it now loses all of its training",
    "stopOldCheckpoint": (
        "This run's last checkpoint is {checkpoint}; stopping it now loses {amount} of training"
    ),
    "stopQuestion": "Stop anyway?",
    # A stopped run's `lost`: `killed at step 390; last checkpoint 300: 90 steps (4 min) lost`.
    "lostSteps": "{steps} steps ({span})",
    "lostStep": "1 step ({span})",
    "stoppedKill": "killed",
    "stoppedBattery": "stopped on battery",
    "stopped": "stopped",
    "stoppedAt": "{verb} at step {step}",
    "lostNothing": "{where}; nothing lost",
    "lostNothingSaved": "{where}; nothing lost (checkpoint at step {step})",
    "lostSince": "{where}; last checkpoint {step}: {amount} lost",
    "lostNoCheckpoint": "{where}; no checkpoint: {amount} lost",
    # The notice of a stop's result: `tiny-lm killed at step 390; last checkpoint 300: 90 steps (4 min) lost`.
    "runStopped": "{job} {lost}",
    "runEnded": "{job} {status}",
    # RunInfo.keepAwake (contract 8.3).
    "keepingAwake": "keeping the machine awake",
    "notKeepingAwake": "not keeping the machine awake",
    "maySleep": "the machine may sleep: {reason}",
    # A run a restart of the machine interrupted (contract 8.3).
    "rebootOffer": (
        "{job} was interrupted by a restart of the machine (run {runId}).{why} {offer}{checkpointFrom}?"
    ),
    "rebootNotResumed": " It was not resumed by itself: {problem}.",
    "rebootFrom": " (its checkpoint {path})",
}
"""Every text, by a name the Node and Lua copies share."""

PLACEHOLDER = re.compile(r"\{(\w+)\}")


def say(key: str, **values: Any) -> str:
    """The text ``key`` with its placeholders filled; a placeholder without a value is a KeyError."""

    def fill(match: re.Match[str]) -> str:
        return str(values[match.group(1)])

    return PLACEHOLDER.sub(fill, TEXTS[key])


def placeholders(key: str) -> list[str]:
    """The names ``TEXTS[key]`` needs, in order of first use."""
    return list(dict.fromkeys(PLACEHOLDER.findall(TEXTS[key])))


def parse_time(text: Any) -> _dt.datetime | None:
    """An ISO 8601 time from the wire (``2026-12-01T15:04:05.123Z``), else None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=_dt.timezone.utc)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def scalar(value: Any) -> str:
    """A number or a string as written (``600``, not ``600.0``); anything else as ``?``."""
    if isinstance(value, bool) or value is None:
        return "?"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value) if isinstance(value, (int, float, str)) else "?"


def round_half_up(value: float) -> int:
    """Rounding as JavaScript's ``Math.round`` and Lua's ``floor(x + 0.5)`` do (not banker's)."""
    return math.floor(value + 0.5)


def fmt_span(seconds: Any) -> str:
    """A span of work a person reads at a glance: ``45 s``, ``4 min``, ``2 h 05 min``."""
    if not _finite(seconds):
        return say("spanUnknown")
    total = max(0, round_half_up(seconds))
    if total == 0 and seconds > 0:
        return say("spanUnderSecond")
    if total < 60:
        return say("spanSeconds", seconds=total)
    minutes = round_half_up(total / 60)
    if minutes < 60:
        return say("spanMinutes", minutes=minutes)
    hours, minutes = divmod(minutes, 60)
    return say("spanHours", hours=hours, minutes=f"{minutes:02d}")


def fmt_age(at: Any, now: _dt.datetime) -> str:
    """``3 h 05 min ago`` of a wire time, or ``at an unknown time``."""
    moment = parse_time(at)
    if moment is None:
        return say("unknownTime")
    return say("ago", span=fmt_span((now - moment).total_seconds()))


def fmt_when(at: Any, now: _dt.datetime) -> str:
    """``2026-12-01 15:04 UTC, 12 min ago`` of a wire time."""
    moment = parse_time(at)
    if moment is None:
        return say("unknownTime")
    utc = moment.astimezone(_dt.timezone.utc)
    return say("when", date=f"{utc:%Y-%m-%d}", time=f"{utc:%H:%M}", age=fmt_age(at, now))


def checkpoint_words(checkpoint: Any, now: _dt.datetime) -> str:
    """``step 600 (checkpoints/ckpt.pt, saved 3 h 05 min ago by run r-1)``."""
    if not isinstance(checkpoint, dict):
        return say("noCheckpoint")
    path = checkpoint.get("path")
    details = [path] if isinstance(path, str) and path else []
    run_id = checkpoint.get("runId")
    age = fmt_age(checkpoint.get("at"), now)
    if isinstance(run_id, str) and run_id:
        details.append(say("checkpointSavedBy", age=age, runId=run_id))
    else:
        details.append(say("checkpointSaved", age=age))
    return say("checkpoint", step=scalar(checkpoint.get("step")), details=", ".join(details))


def prompt(warning: str, question: str) -> str:
    """A question as an editor puts it: the warning, then what to answer."""
    return say("prompt", warning=warning, question=question)


def _record(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def finished_words(job: str, run: Any, now: _dt.datetime) -> str:
    """``1012``: ``tiny-lm is finished: it trained all 600 steps in run r-1 (ended …)``."""
    info = _record(run) or {}
    steps = info.get("totalSteps")
    steps = info.get("step") if steps is None else steps
    what = say("finishedSteps", steps=scalar(steps)) if steps is not None else say("finishedAllSteps")
    run_id = info.get("runId")
    by = say("finishedInRun", runId=run_id) if isinstance(run_id, str) and run_id else ""
    return say("finished", job=job, what=what, by=by, when=fmt_when(info.get("endedAt"), now))


def finished_prompt(job: str, run: Any, now: _dt.datetime) -> str:
    return prompt(finished_words(job, run, now), say("finishedQuestion"))


def mismatch_words(job: str, data: Mapping[str, Any], now: _dt.datetime, start: str | None = None) -> str:
    """``1011``: the step asked for against the job's last checkpoint, with its age, and what a
    plain start does (``start``: how the client says a plain start; the editors' words by default)."""
    last = _record(data.get("lastCheckpoint"))
    words = say("mismatch", job=job, asked=scalar(data.get("asked")), checkpoint=checkpoint_words(last, now))
    if last is None:
        return words
    plain = say("mismatchPlainStart") if start is None else start
    return f"{words}. {say('mismatchResumes', start=plain, step=scalar(last.get('step')))}"


def mismatch_prompt(job: str, data: Mapping[str, Any], now: _dt.datetime) -> str:
    return prompt(mismatch_words(job, data, now), say("mismatchQuestion", asked=scalar(data.get("asked"))))


def lost_amount(lost: Mapping[str, Any]) -> str:
    """``90 steps (4 min)``, or ``4 min`` when the steps are not known (``steps`` null)."""
    steps = _int(lost.get("steps"))
    span = fmt_span(lost.get("seconds"))
    if steps is None:
        return span
    return say("lostStep", span=span) if steps == 1 else say("lostSteps", steps=steps, span=span)


def stop_words(data: Mapping[str, Any], now: _dt.datetime) -> str:
    """``1007``: what stopping now loses: the steps since an old checkpoint (``lost`` and
    ``lastCheckpoint`` in the refusal's data), else the run's whole runtime (``runtimeSeconds``)."""
    lost, last = _record(data.get("lost")), _record(data.get("lastCheckpoint"))
    if lost is not None and last is not None:
        return say("stopOldCheckpoint", checkpoint=checkpoint_words(last, now), amount=lost_amount(lost))
    runtime = data.get("runtimeSeconds")
    if isinstance(runtime, (int, float)) and _finite(runtime) and runtime >= 0:
        return say("stopLoses", span=fmt_span(runtime))
    return say("stopLosesAll")


def stop_prompt(data: Mapping[str, Any], now: _dt.datetime) -> str:
    return prompt(stop_words(data, now), say("stopQuestion"))


STOP_VERBS = {"kill": "stoppedKill", "battery": "stoppedBattery"}


def lost_line(run: Any) -> str | None:
    """``killed at step 390; last checkpoint 300: 90 steps (4 min) lost`` from a stopped run's
    ``lost``; None when the run says nothing of it (``lost`` null or absent)."""
    info = _record(run)
    lost = _record(info.get("lost")) if info is not None else None
    if info is None or lost is None:
        return None
    verb = say(STOP_VERBS.get(str(info.get("stoppedBy")), "stopped"))
    checkpoint = _record(info.get("lastCheckpoint"))
    last = checkpoint.get("step") if checkpoint is not None else None
    step = info.get("step")
    where = say("stoppedAt", verb=verb, step=scalar(step)) if step is not None else verb
    if lost.get("steps") == 0 and not isinstance(lost.get("steps"), bool):
        if last is None:
            return say("lostNothing", where=where)
        return say("lostNothingSaved", where=where, step=scalar(last))
    if last is None:
        return say("lostNoCheckpoint", where=where, amount=lost_amount(lost))
    return say("lostSince", where=where, step=scalar(last), amount=lost_amount(lost))


def stopped_notice(run: Any) -> str:
    """The notice of a stop's result: the job and what was lost, else the job and its status."""
    info = _record(run) or {}
    lost = lost_line(info)
    job = scalar(info.get("jobId"))
    if lost is not None:
        return say("runStopped", job=job, lost=lost)
    return say("runEnded", job=job, status=scalar(info.get("status")))


def keep_awake_words(value: Any, reason: str | None) -> str | None:
    """``RunInfo.keepAwake`` in words; a null says nothing until its reason is known."""
    if value is True:
        return say("keepingAwake")
    if value is False:
        return say("notKeepingAwake")
    return say("maySleep", reason=reason) if reason else None


def reboot_offer_message(run: Mapping[str, Any]) -> str | None:
    """The question of a run a restart interrupted (``afterReboot.offer`` set), or None."""
    info = _record(run.get("afterReboot"))
    if (
        info is None
        or not isinstance(info.get("offer"), str)
        or not info["offer"]
        or not _finite(info.get("step"))
    ):
        return None
    problem = info.get("problem")
    path = info.get("path")
    return say(
        "rebootOffer",
        job=scalar(run.get("jobId")),
        runId=scalar(run.get("runId")),
        why=say("rebootNotResumed", problem=problem) if problem else "",
        offer=info["offer"],
        checkpointFrom=say("rebootFrom", path=path) if isinstance(path, str) and path else "",
    )
