"""What ``arena`` prints: log lines, the live progress bar, run summaries.

On a terminal, log lines scroll above a ``rich`` progress bar; stderr lines
and the supervisor's own (``arena``) lines are marked and styled. Anywhere
else (a pipe, a file, CI) the output is plain lines with no control codes and
a progress line every few seconds. ``ARENA_NO_COLOR`` (or ``NO_COLOR``) turns
colours off on a terminal too.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any, Protocol, TextIO

import attrs
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn
from rich.text import Text

from arena_ls.client.visible_controls import visible, visible_markup

PLAIN_PROGRESS_INTERVAL = 3.0
"""Seconds between progress lines when stdout is not a terminal."""
PLAIN_WIDTH = 120
PROTOCOL_PREFIX = "@arena "
FINAL_STATUSES = frozenset({"stopped", "succeeded", "crashed", "lost"})
OK_STATUSES = frozenset({"stopped", "succeeded"})


def colors_off() -> bool:
    return bool(os.environ.get("ARENA_NO_COLOR") or os.environ.get("NO_COLOR"))


def make_console(file: TextIO | None = None) -> Console:
    """A console on stdout (or ``file``); plain and wide enough when it is not a terminal."""
    stream = file or sys.stdout
    terminal = stream.isatty()
    return Console(
        file=stream,
        no_color=colors_off(),
        highlight=False,
        width=None if terminal else PLAIN_WIDTH,
        color_system="auto" if terminal else None,
    )


# -- numbers -------------------------------------------------------------------------------


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    total = max(0, round(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def fmt_loss(loss: Any) -> str:
    return f"{loss:.4g}" if isinstance(loss, (int, float)) else "?"


def fmt_step(step: Any, total: Any) -> str:
    if step is None:
        return "?"
    return f"{step}/{total}" if total else str(step)


# -- progress state ------------------------------------------------------------------------


@attrs.define
class ProgressState:
    """What the progress bar shows, from RunInfo (``arena/statusChanged``, ``arena/status``)
    and work-done ``$/progress`` reports."""

    title: str
    status: str = "starting"
    step: int | None = None
    total: int | None = None
    loss: float | None = None
    speed: float | None = None
    eta: float | None = None
    message: str | None = None
    percentage: float | None = None
    stalled: bool = False
    prefer_message: bool = False
    """True when a ``$/progress`` report is newer than the last RunInfo."""

    def apply_info(self, info: dict[str, Any]) -> None:
        self.status = str(info.get("status") or self.status)
        self.stalled = bool(info.get("stalled"))
        self.prefer_message = False
        step, total = info.get("step"), info.get("totalSteps")
        if isinstance(step, int):
            self.step = step
        if isinstance(total, int) and total > 0:
            self.total = total
        for name, key in (("loss", "loss"), ("speed", "stepsPerSecond"), ("eta", "etaSeconds")):
            value = info.get(key)
            if isinstance(value, (int, float)) or info.get("status") in FINAL_STATUSES:
                setattr(self, name, value if isinstance(value, (int, float)) else None)

    def apply_report(self, value: dict[str, Any]) -> None:
        """A ``$/progress`` begin or report: the server's own summary and percentage."""
        message, percentage = value.get("message"), value.get("percentage")
        if isinstance(message, str) and message:
            self.message = message
            self.prefer_message = True
        if isinstance(percentage, (int, float)):
            self.percentage = float(percentage)

    @property
    def has_numbers(self) -> bool:
        return self.step is not None

    def text(self) -> str:
        """``step 41/300 · loss 0.0732 · 19.8 it/s · ETA 13s``."""
        final = self.status in FINAL_STATUSES
        if self.message and not final and (self.prefer_message or self.step is None):
            return self.message
        if self.step is None:
            return "no step reported" if final else self.status
        parts = [f"step {fmt_step(self.step, self.total)}"]
        if self.loss is not None:
            parts.append(f"loss {fmt_loss(self.loss)}")
        if self.speed:
            parts.append(f"{self.speed:.3g} it/s")
        if self.eta is not None and self.status not in FINAL_STATUSES:
            parts.append(f"ETA {fmt_duration(self.eta)}")
        if self.stalled:
            parts.append("stalled")
        return " · ".join(parts)

    def completed(self) -> tuple[float, float | None]:
        """(completed, total) for the bar; a percentage when steps are not known.

        Before any number the bar is empty (a total of None would draw rich's
        full-width pulse, which reads as a full bar)."""
        if self.prefer_message and self.percentage is not None and self.total:
            return self.percentage * self.total / 100, float(self.total)
        if self.step is not None and self.total:
            return float(self.step), float(self.total)
        if self.percentage is not None:
            return self.percentage, 100.0
        if self.step is not None and self.status not in FINAL_STATUSES:
            return 0.0, None  # steps but no total: rich's pulse says "working"
        return 0.0, 1.0


# -- log lines -----------------------------------------------------------------------------


def plain_line(line: dict[str, Any]) -> str:
    stream, text = line.get("stream"), str(line.get("text", ""))
    if stream == "stderr":
        return f"[stderr] {text}"
    if stream == "arena":
        return f"[arena] {text}"
    return text


def styled_line(line: dict[str, Any]) -> Text:
    stream, text = line.get("stream"), visible(str(line.get("text", "")))
    if stream == "stderr":
        return Text.assemble(("▌ ", "bold red"), (text, "red"))
    if stream == "arena":
        return Text.assemble(("arena ", "bold cyan"), (text, "cyan"))
    if text.startswith(PROTOCOL_PREFIX):
        return Text(text, style="dim")
    return Text(text)


def run_place(info: dict[str, Any], label: Any = None) -> str:
    """The job (or ``label``), and where it runs when that is a cluster: ``tiny-lm @ lab``."""
    name = str(label if label is not None else info.get("jobId"))
    cluster = info.get("cluster")
    where = cluster.get("name") if isinstance(cluster, dict) else None
    return f"{name} @ {where}" if isinstance(where, str) and where else name


def run_summary(info: dict[str, Any]) -> str:
    """``run X succeeded · exit code 0 · step 15/15 · last checkpoint step 15 (ckpt-15.pt)``."""
    parts = [f"run {info.get('runId')} {info.get('status')}"]
    if info.get("stoppedBy"):
        parts[0] += f" (by {info['stoppedBy']})"
    if info.get("exitCode") is not None:
        parts.append(f"exit code {info['exitCode']}")
    if info.get("signal"):
        parts.append(f"signal {info['signal']}")
    if info.get("step") is not None:
        parts.append(f"step {fmt_step(info.get('step'), info.get('totalSteps'))}")
    checkpoint = info.get("lastCheckpoint")
    if isinstance(checkpoint, dict):
        parts.append(f"last checkpoint step {checkpoint.get('step')} ({checkpoint.get('path')})")
    if isinstance(info.get("resumedFrom"), dict):
        parts.append("resumed from " + resumed_from_text(info["resumedFrom"]))
    failure = info.get("failure")
    if isinstance(failure, dict):
        parts.append(failure_words(failure))
    return " · ".join(parts)


def resumed_from_text(resumed: Any) -> str:
    """``RunInfo.resumedFrom`` (contract 8.2) in words: which checkpoint the run took and why,
    ``step 20: ckpt-20.pt (verified by sha256); skipped step 40 (ckpt-40.pt): is 3 bytes, ...``."""
    if not isinstance(resumed, dict):
        return "-"
    text = f"step {resumed.get('step')}: {resumed.get('path')} (verified by {resumed.get('verified')})"
    skipped = resumed.get("skipped")
    for entry in skipped if isinstance(skipped, list) else []:
        if isinstance(entry, dict):
            text += f"; skipped step {entry.get('step')} ({entry.get('path')}): {entry.get('why')}"
    return text


def failure_words(failure: dict[str, Any]) -> str:
    """``failure error: checkpoint is at step 600, not 50``: the kind once, even when the
    evidence (the trainer's own line, ``error: ...``) starts with the same word."""
    kind = str(failure.get("kind"))
    evidence = str(failure.get("evidence"))
    if evidence.lower().startswith(f"{kind.lower()}:"):
        evidence = evidence[len(kind) + 1 :].lstrip()
    return f"failure {kind}: {evidence}"


# -- following -----------------------------------------------------------------------------


class FollowView(Protocol):
    """Where a followed run's output goes."""

    def open(self) -> None: ...
    def line(self, line: dict[str, Any]) -> None: ...
    def note(self, text: str) -> None: ...
    def progress(self, state: ProgressState) -> None: ...
    def close(self) -> None: ...


class LiveFollowView:
    """A terminal: the log scrolls above a live progress bar."""

    def __init__(self, console: Console, title: str) -> None:
        self.console = console
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
            refresh_per_second=8,
        )
        self.task: TaskID = self.bar.add_task(visible_markup(title), total=1, completed=0, stats="starting")

    def open(self) -> None:
        self.bar.start()

    def line(self, line: dict[str, Any]) -> None:
        self.bar.console.print(styled_line(line), soft_wrap=True)

    def note(self, text: str) -> None:
        self.bar.console.print(Text(f"arena: {visible(text)}", style="bold yellow"), soft_wrap=True)

    def progress(self, state: ProgressState) -> None:
        completed, total = state.completed()
        self.bar.update(
            self.task,
            description=visible_markup(f"{state.title} · {state.status}"),
            completed=completed,
            total=total,
            stats=visible_markup(state.text()),
        )

    def close(self) -> None:
        self.bar.stop()


class PlainFollowView:
    """Not a terminal: plain lines, and a ``[progress]`` line every few seconds."""

    def __init__(
        self,
        stream: IO[str],
        interval: float = PLAIN_PROGRESS_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.interval = interval
        self.clock = clock
        self.last_at: float | None = None
        self.last_text = ""

    def open(self) -> None:
        pass

    def _write(self, text: str) -> None:
        write_line(self.stream, text)

    def line(self, line: dict[str, Any]) -> None:
        self._write(plain_line(line))

    def note(self, text: str) -> None:
        self._write(f"arena: {text}")

    def progress(self, state: ProgressState) -> None:
        if not (state.has_numbers or state.message):
            return
        now, text = self.clock(), state.text()
        due = self.last_at is None or now - self.last_at >= self.interval
        if due and text != self.last_text:
            self.last_at, self.last_text = now, text
            self._write(f"[progress] {text}")

    def close(self) -> None:
        pass


def make_follow_view(console: Console, title: str) -> FollowView:
    if console.is_terminal:
        return LiveFollowView(console, title)
    return PlainFollowView(console.file)


def print_line(console: Console, line: dict[str, Any]) -> None:
    """One log line outside following: styled on a terminal, plain elsewhere."""
    if console.is_terminal:
        console.print(styled_line(line), soft_wrap=True)
    else:
        write_plain(console, plain_line(line))


def write_plain(console: Console, text: str) -> None:
    """A line exactly as given (no wrapping, no markup, no control codes), flushed."""
    if console.is_terminal:
        console.print(Text(visible(text)), soft_wrap=True)
        return
    write_line(console.file, text)


def write_line(stream: IO[str], text: str, *, lines: bool = False) -> None:
    """One line, flushed; a reader that went away (``arena stop | head -1``) is not an error:
    the rest of the output is dropped and the command still does its work. Control characters
    are made visible (``visible``); ``lines``: the text's own line ends stay (``--json``)."""
    shown = "\n".join(map(visible, text.split("\n"))) if lines else visible(text)
    try:
        stream.write(shown + "\n")
        stream.flush()
    except BrokenPipeError:
        discard_stdout(stream)


def discard_stdout(stream: IO[str] | None = None) -> None:
    """Point the stream's file descriptor at the null device, so that later writes, and
    the interpreter's final flush, cannot raise ``BrokenPipeError`` again."""
    stream = stream or sys.stdout
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, fd)
    finally:
        os.close(null)


def relaunch_costs(steps_lost: int | None, downtime_seconds: float | None) -> list[str]:
    """What a relaunch cost, in words: ``3 steps lost``, ``2.4 s down`` (each only when known)."""
    costs = []
    if steps_lost is not None:
        costs.append(f"{steps_lost} step{'s' if steps_lost != 1 else ''} lost")
    if downtime_seconds is not None and downtime_seconds == downtime_seconds:
        costs.append(f"{downtime_seconds:.1f} s down")
    return costs
