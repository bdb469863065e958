"""Contract 8.1: a trainer that announces another ``@arena`` protocol is told so in the log (one
``arena`` line a run), never failed, and its announcements are still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_ls.run.trainer_announcements import PROTOCOL, Checkpoint, EventParser, Progress, other_protocol


def line(protocol: object, event: str = "progress", **fields: object) -> str:
    return "@arena " + json.dumps({"event": event, "step": 3, **fields, "protocol": protocol})


def test_the_agent_speaks_the_kits_protocol() -> None:
    import arena_trainer

    assert PROTOCOL == arena_trainer.PROTOCOL == 1


@pytest.mark.parametrize("payload", [{}, {"protocol": 1}, {"event": "progress", "step": 1, "protocol": 1}])
def test_protocol_1_or_none_is_no_news(payload: dict[str, object]) -> None:
    assert other_protocol(payload) is None


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (2, "2"),
        (0, "0"),
        (-1, "-1"),
        (True, "True, not an integer"),
        (1.0, "1.0, not an integer"),
        ("1", "'1', not an integer"),
        (None, "None, not an integer"),
        ([1], "[1], not an integer"),
        (10**300, "an integer of 997 bits"),
    ],
)
def test_any_other_protocol_is_named(value: object, said: str) -> None:
    parser = EventParser()
    text = "@arena " + json.dumps({"event": "progress", "step": 3, "protocol": value})
    event = parser.parse(text)
    if isinstance(value, int) and value > 10**20:  # beyond what a JSON number is read as
        said = "a number too large to read"
    assert event == Progress(step=3)
    note = parser.take_protocol_note()
    assert note is not None and f"protocol {said};" in note and "reads protocol 1" in note


def test_the_announcements_are_still_read_and_told_once_per_parser() -> None:
    parser = EventParser()
    assert parser.parse(line(2, loss=0.5)) == Progress(step=3, loss=0.5)
    assert parser.parse(line(2, "checkpoint", path="ck/3.pt")) == Checkpoint(step=3, path="ck/3.pt")
    assert parser.speaks_arena  # read as a protocol-1 checkpoint line in every way
    assert parser.take_protocol_note() is not None
    assert parser.parse(line(3)) == Progress(step=3)  # yet another: still only one line a run
    assert parser.take_protocol_note() is None


def test_a_line_that_is_no_announcement_still_tells_its_protocol() -> None:
    """An unknown event, or an out-of-range step, is an ordinary line; its protocol is still news."""
    parser = EventParser()
    assert parser.parse("@arena " + json.dumps({"event": "hello", "protocol": 2})) is None
    assert parser.take_protocol_note() is not None


def test_no_protocol_and_invalid_json_tell_nothing() -> None:
    parser = EventParser()
    for text in ['@arena {"event": "progress", "step": 1}', '@arena {"protocol": 2', "@arena [2]"]:
        parser.parse(text)
    assert parser.take_protocol_note() is None


def test_a_flood_and_a_chunk_tell_it_too() -> None:
    parser = EventParser()
    chunk = ("x\n" * 40000 + line(7) + "\n" + "y\n" * 10).encode()
    list(parser.parse_flood(chunk))
    assert "protocol 7;" in (parser.take_protocol_note() or "")


async def test_a_real_server_tells_a_trainer_of_protocol_2_once_and_it_succeeds(tmp_path: Path) -> None:
    from tests.helpers.lsp import all_logs, job, make_workspace, start_server, stop_server, wait_status

    spec = job("lm", "--steps", "6", "--ckpt-every", "2", "--protocol", "2", kind="train")
    root = make_workspace(tmp_path / "ws", [spec])
    client = await start_server(root)
    try:
        run = await client.call("arena/start", {"id": "lm"})
        final = await wait_status(client, run["runId"], "succeeded", "crashed")
        lines = await all_logs(client, run["runId"])
        told = [ln for ln in lines if "@arena protocol 2;" in ln["text"]]
        assert final["status"] == "succeeded" and final["exitCode"] == 0, lines[-10:]
        assert len(told) == 1 and told[0]["stream"] == "arena", told
        assert told[0]["text"].startswith("warning: the trainer announces @arena protocol 2;")
        assert final["step"] == 6 and final["lastCheckpoint"]["step"] == 6, final
    finally:
        await stop_server(client)
