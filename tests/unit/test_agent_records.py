"""The supervisor's typed records: each renders the words the agents always wrote, and reads back.

The words are the contract's (``arena/log`` ``arena`` lines); the expected strings below are
what main's agents wrote as plain text, so a change of wording fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_ls.run import agent_records
from arena_ls.run.agent_records import AgentRecord, Kind, parse, render
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.outputlog import ARENA, OutputWriter

WORDS = [
    (
        agent_records.starting("tiny-lm", ["py", "train.py", "--resume", "5"]),
        "starting tiny-lm: py train.py --resume 5",
    ),
    (agent_records.exited(3, None), "job exited with code 3"),
    (agent_records.exited(None, "SIGKILL"), "job was killed by SIGKILL"),
    (agent_records.crashed("tiny-lm", -9, "SIGKILL"), "TRAINING_CRASHED: tiny-lm code -9"),
    (agent_records.crashed("tiny-lm", 1, None), "TRAINING_CRASHED: tiny-lm code 1"),
    (agent_records.crashed("tiny-lm", None, "SIGRTMIN"), "TRAINING_CRASHED: tiny-lm signal SIGRTMIN"),
    (agent_records.crashed("tiny-lm", None, None), "TRAINING_CRASHED: tiny-lm with no exit status"),
    (agent_records.failure("oom", "CUDA out of memory"), "failure: oom: CUDA out of memory"),
    (
        agent_records.failure("resume-refused", "no checkpoint at step 50", final=True),
        "failure: resume-refused: no checkpoint at step 50; not relaunching",
    ),
    (agent_records.restarting(500, 1, 3, 5.0), "restarting from step 500 (attempt 1/3) in 5s"),
    (
        agent_records.restarting(None, 2, 3, 0.25),
        "restarting from scratch (no checkpoint yet) (attempt 2/3) in 0.25s",
    ),
    (
        agent_records.gave_up("crashed again at step 5 after a relaunch from it"),
        "crash loop: crashed again at step 5 after a relaunch from it; not relaunching",
    ),
    (agent_records.warning("loss is nan at step 3"), "warning: loss is nan at step 3"),
    (agent_records.stopped("signal"), "stopped (by signal)"),
    (agent_records.finished("tiny-lm"), "tiny-lm finished"),
    (agent_records.ended("succeeded"), "run ended: succeeded"),
    (agent_records.submitting("lab", "arena-r1-1"), "submitting to cluster lab as arena-r1-1"),
    (agent_records.note("stop requested by a client (kill)"), "stop requested by a client (kill)"),
]


@pytest.mark.parametrize(("event", "words"), WORDS, ids=[w for _, w in WORDS])
def test_a_record_renders_the_words_the_agents_always_wrote(event: AgentRecord, words: str) -> None:
    line = event.encode()
    assert "\n" not in line and line.startswith(agent_records.MARK)
    assert json.loads(line)["kind"] == event.kind.value
    assert parse(line) == event
    assert render(line) == words


@pytest.mark.parametrize(("event", "words"), WORDS, ids=[w for _, w in WORDS])
def test_an_earlier_agents_plain_line_reads_as_the_same_kind(event: AgentRecord, words: str) -> None:
    """Runs on disk from main's agents (text only) keep their meaning and their words."""
    old = parse(words)
    assert old.render() == words
    recognised = {Kind.STARTING, Kind.RESTARTING, Kind.CRASHED, Kind.WARNING, Kind.SUBMITTING}
    assert old.kind is (event.kind if event.kind in recognised else Kind.NOTE)
    if event.kind is Kind.RESTARTING:
        assert old.step == event.step


def test_a_text_with_newlines_stays_one_record_line() -> None:
    event = agent_records.note("two\nlines")
    assert "\n" not in event.encode()
    assert parse(event.encode()).render() == "two\nlines"


def test_a_broken_or_unknown_record_is_shown_not_lost() -> None:
    broken = '{"supervisor": 1, "kind": "crashed", "job": '
    assert parse(broken).kind is Kind.NOTE and render(broken) == broken
    later = json.dumps({"supervisor": 2, "kind": "teleported", "text": "moved to the moon"})
    assert parse(later).kind is Kind.NOTE and render(later) == "moved to the moon"
    no_words = json.dumps({"supervisor": 2, "kind": "teleported"})
    assert "teleported" in render(no_words)


def test_a_trainer_like_line_is_never_a_record_by_accident() -> None:
    """Only the record's exact mark makes a record: words that merely look alike are legacy text."""
    assert parse('{"kind": "crashed"}').kind is Kind.NOTE
    assert parse("the warning light").kind is Kind.NOTE
    assert parse("starting over").kind is Kind.NOTE


def test_record_fields_of_the_wrong_type_render_without_failing() -> None:
    line = json.dumps({"supervisor": 1, "kind": "restarting", "step": "x", "delay": "soon", "attempt": True})
    assert parse(line).step is None
    assert render(line).startswith("restarting from scratch")


def test_a_records_words_get_the_hygiene_of_any_line(tmp_path: Path) -> None:
    """A failure's evidence quotes the trainer (escapes, carriage returns): cleaned as a plain line was."""
    writer = OutputWriter(tmp_path)
    evidence = "50%\r\x1b[31mRuntimeError\x1b[0m: boom"
    writer.append_line(ARENA, agent_records.failure("error", evidence).encode())
    writer.append_line(ARENA, f"failure: error: {evidence}")  # main's agent wrote it so
    writer.close()
    typed, plain = list(iter_all_lines(tmp_path))
    assert typed.text == plain.text == "RuntimeError: boom"
    assert typed.event is not None and typed.event.kind is Kind.FAILURE


def test_a_note_with_lines_inside_is_that_many_lines_as_a_plain_one_was(tmp_path: Path) -> None:
    """The cluster agent says a head's multi-line error page in one note: the same lines as before."""
    writer = OutputWriter(tmp_path)
    page = "the cluster did not accept the job: 500\nGET /x\nHost: <address>\n"
    writer.append_line(ARENA, agent_records.note(page).encode_lines())
    writer.append_line(ARENA, agent_records.warning("no answer\nretrying").encode_lines())
    writer.append_line(ARENA, page)  # main's agent wrote it so
    writer.close()
    lines = list(iter_all_lines(tmp_path))
    words = ["the cluster did not accept the job: 500", "GET /x", "Host: <address>"]
    assert [line.text for line in lines] == [*words, "warning: no answer", "retrying", *words]
    assert [line.seq for line in lines] == list(range(8))
    assert lines[3].event is not None and lines[3].event.is_warning
