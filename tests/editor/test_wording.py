"""The clients' words are written once (arena_ls/wording.py) and the editors' copies generated.

Checked here, without Node or Neovim (their own unit tests compare their functions with
``tests/editor/fixtures/wording_cases.json``):

- what is committed is what ``python -m arena_ls.wording_gen --write`` writes (CI runs
  ``--check`` too), and ``--check`` fails on a copy that drifted;
- every text is used by the VS Code core and by the Neovim plugin (a text one of them does
  not use is a text it says in words of its own), and no client keeps the old copies;
- ``say`` fills every placeholder and refuses a missing one;
- the disagreements that made this module are settled: a run 3 s old loses "3 s", in every
  client (AIDE said "3 seconds", the others "1 minute"), and the terminal client's spans
  round as the editors' do.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import shutil
from pathlib import Path

import pytest

from arena_ls import errors, wording, wording_gen
from arena_ls.client import asks
from arena_ls.client.errors import from_rpc_error
from arena_ls.client.lspclient import JsonRpcError

REPO = Path(__file__).resolve().parents[2]
NOW = _dt.datetime(2026, 12, 1, 16, 0, tzinfo=_dt.timezone.utc)
TS_CORE = REPO / "editor-client" / "vscode" / "src" / "core"
LUA_PLUGIN = REPO / "editor-client" / "nvim" / "lua" / "arena"


def test_the_committed_copies_are_what_the_generator_writes() -> None:
    stale = wording_gen.stale_files(REPO)
    assert not stale, f"run {wording_gen.COMMAND}: {sorted(map(str, stale))}"


def test_check_fails_on_a_copy_that_drifted_and_write_mends_it(tmp_path: Path) -> None:
    for relative in wording_gen.generated():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / relative, tmp_path / relative)
    lua = tmp_path / wording_gen.WORDING_LUA
    lua.write_text(lua.read_text(encoding="utf-8").replace("Stop anyway?", "Stop?"), encoding="utf-8")
    assert wording_gen.main(["--check", "--root", str(tmp_path)]) == 1
    assert wording_gen.main(["--write", "--root", str(tmp_path)]) == 0
    assert wording_gen.main(["--check", "--root", str(tmp_path)]) == 0
    assert lua.read_bytes() == (REPO / wording_gen.WORDING_LUA).read_bytes()


def _sources(folder: Path, suffix: str, generated: Path) -> str:
    return "\n".join(
        path.read_text(encoding="utf-8")
        for path in sorted(folder.glob(f"*{suffix}"))
        if path.name != generated.name
    )


@pytest.mark.parametrize(
    ("folder", "suffix", "generated"),
    [(TS_CORE, ".ts", wording_gen.WORDING_TS), (LUA_PLUGIN, ".lua", wording_gen.WORDING_LUA)],
    ids=["vscode", "nvim"],
)
def test_every_text_is_used_by_each_editor(folder: Path, suffix: str, generated: Path) -> None:
    code = _sources(folder, suffix, generated)
    used = set(re.findall(r'say\("(\w+)"', code)) | set(re.findall(r'"(stopped\w*)"', code))
    unused = sorted(set(wording.TEXTS) - used)
    assert not unused, f"{folder.name} does not use {unused}: does it say them in words of its own?"


OLD_COPIES = (
    "This run has no checkpoint yet",
    "minutes of training",
    "seconds of training",
    "} second",
    "Stop it",
)


@pytest.mark.parametrize(
    "path",
    [
        TS_CORE / "refusals.ts",
        TS_CORE / "workLost.ts",
        LUA_PLUGIN / "refusals.lua",
        LUA_PLUGIN / "worklost.lua",
        REPO / "editor-client" / "aide" / "training-arena.mjs",
        REPO / "arena_ls" / "client" / "asks.py",
    ],
    ids=lambda path: path.name,
)
def test_no_client_keeps_its_own_copy_of_the_stop_question(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert not [old for old in OLD_COPIES if old in text]


def test_say_fills_each_placeholder_and_refuses_a_missing_one() -> None:
    assert wording.say("maySleep", reason="no bus {x}") == "the machine may sleep: no bus {x}"
    with pytest.raises(KeyError):
        wording.say("maySleep")
    for key, text in wording.TEXTS.items():
        names = wording.placeholders(key)
        filled = wording.say(key, **{name: f"<{name}>" for name in names})
        assert "{" not in filled.replace("{x}", ""), (key, filled)
        assert text.count("{") == text.count("}") == len(wording.PLACEHOLDER.findall(text)), key


def test_a_run_seconds_old_loses_its_seconds_not_a_minute() -> None:
    """Issue 38: AIDE said "3 seconds" where the others said "1 minute" for the same refusal; the
    server's ``runtimeSeconds`` (3.2) is the work lost, so every client says "3 s"."""
    said = wording.stop_prompt({"runtimeSeconds": 3.2}, NOW)
    assert said == "This run has no checkpoint yet; stopping it now loses 3 s of training. Stop anyway?"
    assert wording.stop_words({"runtimeSeconds": 612}, NOW).endswith("loses 10 min of training")
    assert wording.stop_words({}, NOW).endswith("loses all of its training")
    assert wording.stop_words({"runtimeSeconds": float("nan")}, NOW).endswith("loses all of its training")


def test_spans_round_half_up_as_the_editors_do() -> None:
    """Python's round() is banker's (``round(44.5) == 44``); JavaScript's Math.round and Lua's
    floor(x + 0.5) give 45: every client now says 45 s."""
    spans = [wording.fmt_span(s) for s in (44.5, 150, 3570, 7500)]
    assert spans == ["45 s", "3 min", "1 h 00 min", "2 h 05 min"]


def test_the_terminal_client_asks_in_the_same_words() -> None:
    data = {"asked": 50, "lastCheckpoint": {"step": 600, "path": "ckpt.pt", "at": "2026-12-01T15:00:00Z"}}
    question = asks.start_question(JsonRpcError(1011, "x", data), {"id": "lm", "startStep": 50}, NOW)
    assert question is not None
    editor = wording.mismatch_prompt("lm", data, NOW)
    assert editor.startswith(question.warning.split(". `arena start lm`")[0])
    assert editor.endswith(question.question)
    stop = asks.stop_question(JsonRpcError(1007, "x", {"runtimeSeconds": 3.2}), {}, NOW)
    assert stop is not None and wording.prompt(stop.warning, stop.question) == wording.stop_prompt(
        {"runtimeSeconds": 3.2}, NOW
    )


def test_the_cases_cover_every_function_and_say_something() -> None:
    cases = json.loads((REPO / wording_gen.WORDING_CASES).read_text(encoding="utf-8"))
    assert {case["fn"] for case in cases["cases"]} == set(wording_gen.FUNCTIONS)
    assert sum(case["text"] is not None for case in cases["cases"]) >= 30


def test_every_refusal_of_the_server_is_in_refusals_and_every_client_knows_its_reason() -> None:
    """The clients' code-to-reason tables were written by hand and stopped at 1012: the server's
    1013 ``cluster-unreachable`` read "server error 1013" in the terminal."""
    declared = {value for value in vars(errors).values() if isinstance(value, tuple) and len(value) == 2}
    kinds = {value for value in declared if isinstance(value[0], int) and isinstance(value[1], str)}
    assert kinds == set(errors.REFUSALS)
    assert len({code for code, _ in errors.REFUSALS}) == len(errors.REFUSALS)
    message = from_rpc_error(
        JsonRpcError(1013, "the head is down", {"reason": "cluster-unreachable"})
    ).message
    assert message == "refused (cluster-unreachable): the head is down"
    ts = (REPO / wording_gen.WORDING_TS).read_text(encoding="utf-8")
    lua = (REPO / wording_gen.WORDING_LUA).read_text(encoding="utf-8")
    for code, reason in errors.REFUSALS:
        assert f'  {code}: "{reason}",' in ts and f'  [{code}] = "{reason}",' in lua
