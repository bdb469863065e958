"""The terminal's questions for refusals that would lose or overwrite work (contract 7.1, 7.3):
``1012 already-finished``, ``1011 checkpoint-mismatch``, ``1007 no-checkpoint`` with an old
checkpoint, and the words for a stopped run's ``lost``. Contract-shaped data, a fake session:
the server side of these is built in parallel (tests/client/test_asks_e2e.py runs them on it)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import io
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from arena_ls.client import commands
from arena_ls.client.asks import (
    fmt_span,
    lost_line,
    start_question,
    stop_question,
)
from arena_ls.client.errors import CliError, from_rpc_error
from arena_ls.client.lspclient import JsonRpcError
from arena_ls.client.render import make_console, run_summary
from arena_ls.client.session import Options

NOW = dt.datetime(2026, 12, 1, 16, 0, 0, tzinfo=dt.timezone.utc)
CHECKPOINT = {"step": 600, "path": "checkpoints/tiny-lm/ckpt_latest.pt", "at": "2026-12-01T12:55:00.000Z"}


def finished_run() -> dict[str, Any]:
    return {
        "runId": "tiny-lm-1",
        "jobId": "tiny-lm",
        "status": "succeeded",
        "step": 600,
        "totalSteps": 600,
        "endedAt": "2026-12-01T15:48:00.000Z",
        "lastCheckpoint": CHECKPOINT,
    }


def already_finished() -> JsonRpcError:
    return JsonRpcError(
        1012, "job tiny-lm already finished", {"reason": "already-finished", "run": finished_run()}
    )


def mismatch(asked: int = 50) -> JsonRpcError:
    last = {**CHECKPOINT, "runId": "tiny-lm-1"}
    return JsonRpcError(
        1011,
        "startStep 50 is not the job's last checkpoint",
        {"reason": "checkpoint-mismatch", "asked": asked, "lastCheckpoint": last},
    )


def old_checkpoint() -> JsonRpcError:
    return JsonRpcError(
        1007,
        "run tiny-lm-2's last checkpoint is old: stopping it loses 90 steps; pass confirm",
        {
            "reason": "no-checkpoint",
            "runtimeSeconds": 1200.0,
            "lastCheckpoint": {
                "step": 300,
                "path": "ckpt.pt",
                "at": "2026-12-01T15:54:00.000Z",
                "runId": "r2",
            },
            "lost": {"steps": 90, "seconds": 240.0},
        },
    )


# -- the words ------------------------------------------------------------------------------


def test_an_already_finished_job_says_its_step_and_when_and_offers_fresh() -> None:
    question = start_question(already_finished(), {"id": "tiny-lm", "approved": False}, NOW)
    assert question is not None
    assert question.warning == (
        "tiny-lm is finished: it trained all 600 steps in run tiny-lm-1 "
        "(ended 2026-12-01 15:48 UTC, 12 min ago)"
    )
    assert question.command == "arena start tiny-lm --fresh"
    assert question.question.startswith("Start over from step 0")
    retried = question.retried({"id": "tiny-lm", "approved": False, "resume": True, "startStep": 600})
    assert retried == {"id": "tiny-lm", "approved": False, "resume": False}


def test_a_mismatched_step_says_the_checkpoint_step_and_its_age() -> None:
    question = start_question(mismatch(), {"id": "tiny-lm", "resume": True, "startStep": 50}, NOW)
    assert question is not None
    assert question.warning == (
        "You asked to start tiny-lm at step 50, but its last checkpoint is step 600 "
        "(checkpoints/tiny-lm/ckpt_latest.pt, saved 3 h 05 min ago by run tiny-lm-1). "
        "`arena start tiny-lm` resumes from step 600"
    )
    assert question.retried({"id": "tiny-lm", "startStep": 50})["confirm"] is True
    assert question.command == "arena start tiny-lm --start-step 50 --confirm"


def test_a_stop_of_a_run_with_an_old_checkpoint_says_how_much_is_lost() -> None:
    question = stop_question(old_checkpoint(), {"id": "tiny-lm", "kill": True, "confirm": False}, NOW)
    assert question is not None
    assert question.warning == (
        "This run's last checkpoint is step 300 (ckpt.pt, saved 6 min ago by run r2); "
        "stopping it now loses 90 steps (4 min) of training"
    )
    assert question.command == "arena stop tiny-lm --kill --confirm"
    assert question.retried({"id": "tiny-lm", "kill": True, "confirm": False})["confirm"] is True


def test_a_stop_without_any_checkpoint_says_the_runtime_it_loses() -> None:
    error = JsonRpcError(1007, "run r has announced no checkpoint: x", {"runtimeSeconds": 600.0})
    question = stop_question(error, {"kill": False, "confirm": False}, NOW)
    assert question is not None and question.command == "arena stop --confirm"
    assert question.warning == "This run has no checkpoint yet; stopping it now loses 10 min of training"


@pytest.mark.parametrize(
    "error",
    [
        JsonRpcError(1012, "x", None),
        JsonRpcError(1012, "x", {"run": "junk"}),
        JsonRpcError(1011, "x", {"asked": 5, "lastCheckpoint": None}),
        JsonRpcError(1011, "x", ["not", "a", "dict"]),
        JsonRpcError(1007, "x", {"lost": {"steps": "many"}, "lastCheckpoint": {"at": "yesterday"}}),
    ],
)
def test_malformed_refusal_data_still_gives_one_line(error: JsonRpcError) -> None:
    question = start_question(error, {"id": "j"}, NOW) or stop_question(error, {"id": "j"}, NOW)
    assert question is not None
    assert "\n" not in question.refusal() and question.command.startswith("arena ")


def test_other_refusals_are_no_question() -> None:
    error = JsonRpcError(1003, "busy", {"reason": "already-running"})
    assert start_question(error, {"id": "j"}, NOW) is None and stop_question(error, {}, NOW) is None


def test_1011_and_1012_are_refusals_for_the_terminal() -> None:
    assert from_rpc_error(already_finished()).message.startswith("refused (already-finished): ")
    assert from_rpc_error(mismatch()).message.startswith("refused (checkpoint-mismatch): ")


@pytest.mark.parametrize(
    ("info", "line"),
    [
        (
            {
                "step": 390,
                "stoppedBy": "kill",
                "lastCheckpoint": {"step": 300},
                "lost": {"steps": 90, "seconds": 240},
            },
            "killed at step 390; last checkpoint 300: 90 steps (4 min) lost",
        ),
        (
            {
                "step": 412,
                "stoppedBy": "file",
                "lastCheckpoint": {"step": 412},
                "lost": {"steps": 0, "seconds": 0},
            },
            "stopped at step 412; nothing lost (checkpoint at step 412)",
        ),
        (
            {"step": 40, "stoppedBy": "kill", "lastCheckpoint": None, "lost": {"steps": 40, "seconds": 30.4}},
            "killed at step 40; no checkpoint: 40 steps (30 s) lost",
        ),
        (
            {"step": None, "stoppedBy": "signal", "lost": {"steps": None, "seconds": 95}},
            "stopped; no checkpoint: 2 min lost",
        ),
        ({"step": 40, "stoppedBy": "kill", "lost": None}, None),
        ({"step": 40}, None),
    ],
)
def test_a_stopped_run_says_what_was_lost(info: dict[str, Any], line: str | None) -> None:
    assert lost_line(info) == line


def test_spans_read_at_a_glance() -> None:
    assert [fmt_span(s) for s in (0, 59, 240, 3599, 7500)] == [
        "0 s",
        "59 s",
        "4 min",
        "1 h 00 min",
        "2 h 05 min",
    ]
    assert fmt_span(None) == fmt_span(float("nan")) == fmt_span(True) == "?"


def test_the_failure_kind_is_said_once() -> None:
    """Regression (issue 23 item 2): ``failure error: error: checkpoint is at step 600``."""
    info = {
        "runId": "r",
        "status": "crashed",
        "failure": {"kind": "error", "evidence": "error: checkpoint is at step 600, not 50"},
    }
    assert run_summary(info) == "run r crashed · failure error: checkpoint is at step 600, not 50"
    oom = {"runId": "r", "status": "crashed", "failure": {"kind": "oom", "evidence": "CUDA out of memory"}}
    assert run_summary(oom).endswith("failure oom: CUDA out of memory")


# -- the conversation -------------------------------------------------------------------------


class FakeSession:
    """Answers each request with the next canned answer (an error to raise, or a result)."""

    def __init__(self, answers: dict[str, list[Any]]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self.sent.append((method, dict(params)))
        answer = self.answers[method].pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def options_for(
    tmp_path: Path, *, interactive: bool, answer: bool = True
) -> tuple[Options, io.StringIO, list[str]]:
    out = io.StringIO()
    asked: list[str] = []

    def ask(question: str) -> bool:
        asked.append(question)
        return answer

    options = Options(tmp_path, False, make_console(out), interactive=interactive, ask=ask)
    return options, out, asked


def run_command(monkeypatch: pytest.MonkeyPatch, session: FakeSession, call: Any) -> int:
    @contextlib.asynccontextmanager
    async def connect(_: Options) -> AsyncIterator[FakeSession]:
        yield session

    monkeypatch.setattr(commands, "connect", connect)
    result: int = asyncio.run(call)
    return result


def start_args(**given: Any) -> argparse.Namespace:
    defaults = {
        "job": "tiny-lm",
        "approve": False,
        "fresh": False,
        "start_step": None,
        "follow": False,
        "confirm": False,
    }
    return argparse.Namespace(**{**defaults, **given})


STARTED = {"runId": "tiny-lm-2", "jobId": "tiny-lm", "pid": 1, "agentPid": 2, "resumedFromStep": None}


def test_a_finished_job_on_a_terminal_asks_and_starts_over_on_yes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = FakeSession({"arena/start": [already_finished(), STARTED]})
    options, out, asked = options_for(tmp_path, interactive=True, answer=True)
    assert run_command(monkeypatch, session, commands.cmd_start(options, start_args())) == 0
    assert len(asked) == 1 and asked[0].startswith("Start over from step 0")
    assert [params.get("resume") for _, params in session.sent] == [None, False]
    text = out.getvalue()
    assert "tiny-lm is finished: it trained all 600 steps" in text and "started run tiny-lm-2" in text


def test_a_finished_job_on_a_terminal_starts_nothing_on_no(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = FakeSession({"arena/start": [already_finished()]})
    options, _, asked = options_for(tmp_path, interactive=True, answer=False)
    with pytest.raises(CliError, match=r"refused \(already-finished\): nothing done"):
        run_command(monkeypatch, session, commands.cmd_start(options, start_args()))
    assert len(asked) == 1 and len(session.sent) == 1


def test_a_finished_job_without_a_terminal_prints_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (issue 27 item 2): a start of a finished job was a silent success."""
    session = FakeSession({"arena/start": [already_finished()]})
    options, _, asked = options_for(tmp_path, interactive=False)
    with pytest.raises(CliError) as refused:
        run_command(monkeypatch, session, commands.cmd_start(options, start_args()))
    assert refused.value.exit_code == 1 and asked == []
    assert refused.value.message.startswith("refused (already-finished): tiny-lm is finished")
    assert refused.value.message.endswith("to do it anyway: arena start tiny-lm --fresh")


def test_a_mismatched_step_is_retried_with_confirm_on_yes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = FakeSession({"arena/start": [mismatch(), {**STARTED, "resumedFromStep": 50}]})
    options, out, asked = options_for(tmp_path, interactive=True)
    code = run_command(monkeypatch, session, commands.cmd_start(options, start_args(start_step=50)))
    assert code == 0 and asked == ["Start at step 50 anyway?"]
    first, second = (params for _, params in session.sent)
    assert "confirm" not in first and second == {**first, "confirm": True}
    assert re.search(r"last checkpoint is step 600 \(\S+, saved \d+ h \d\d min ago", out.getvalue())


def test_start_confirm_flag_sends_confirm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = FakeSession({"arena/start": [STARTED]})
    options, _, _ = options_for(tmp_path, interactive=False)
    run_command(monkeypatch, session, commands.cmd_start(options, start_args(start_step=50, confirm=True)))
    assert session.sent[0][1]["confirm"] is True


def test_a_stop_with_an_old_checkpoint_asks_then_says_what_was_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopped = {
        "runId": "tiny-lm-2",
        "status": "stopped",
        "stoppedBy": "kill",
        "step": 390,
        "lastCheckpoint": {"step": 300, "path": "ckpt.pt", "at": "t"},
        "lost": {"steps": 90, "seconds": 240.0},
        "tail": [],
    }
    session = FakeSession({"arena/stop": [old_checkpoint(), stopped]})
    options, out, asked = options_for(tmp_path, interactive=True)
    args = argparse.Namespace(job="tiny-lm", kill=True, confirm=False, grace=None)
    assert run_command(monkeypatch, session, commands.cmd_stop(options, args)) == 0
    assert asked == ["Stop anyway?"] and session.sent[1][1]["confirm"] is True
    lines = out.getvalue().splitlines()
    assert "stopping it now loses 90 steps (4 min) of training" in lines[0]
    assert "killed at step 390; last checkpoint 300: 90 steps (4 min) lost" in lines


def test_a_server_that_keeps_refusing_is_asked_a_bounded_number_of_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = FakeSession({"arena/start": [mismatch() for _ in range(10)]})
    options, _, asked = options_for(tmp_path, interactive=True)
    with pytest.raises(JsonRpcError):
        run_command(monkeypatch, session, commands.cmd_start(options, start_args(start_step=50)))
    assert len(asked) == commands.MAX_QUESTIONS and len(session.sent) == commands.MAX_QUESTIONS + 1


def test_a_1012_outside_a_question_still_says_the_command(tmp_path: Path) -> None:
    message = from_rpc_error(already_finished()).message
    assert message.startswith("refused (already-finished): tiny-lm is finished: it trained all 600 steps")
    assert message.endswith("to do it anyway: arena start tiny-lm --fresh")


def test_the_demo_trains_a_finished_job_again_when_the_server_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = FakeSession({"arena/start": [already_finished(), STARTED]})
    options, out, asked = options_for(tmp_path, interactive=False)
    info = asyncio.run(commands.start_demo(session, options, {"id": "tiny-lm", "approved": True}))  # type: ignore[arg-type]
    assert info == STARTED and asked == []
    assert session.sent[1][1] == {"id": "tiny-lm", "approved": True, "resume": False}
    assert "is finished: it trained all 600 steps" in out.getvalue()
    assert out.getvalue().rstrip().endswith("training it again from step 0")
