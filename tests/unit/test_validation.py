"""The shared checks of JSON values (``arena_ls.validation``), and the words each boundary builds on them."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from arena_ls.client.cli import _count, _seconds
from arena_ls.errors import InvalidParams
from arena_ls.manifest import load_manifest_text
from arena_ls.protocol.params import parse_logs, parse_start, parse_stop
from arena_ls.settings import parse_settings
from arena_ls.validation import (
    BOOLEAN,
    REGEX,
    STRING,
    STRING_LIST,
    STRING_MAP,
    Invalid,
    choice,
    finite,
    integer,
    json_kind,
    list_of,
    missing_fields,
    number,
    one_of,
    positive_number,
    read_field,
    shown,
    string,
    unknown_fields,
)

NOT_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (BOOLEAN, [True, False], [0, 1, "true", None]),
        (STRING, ["", "x"], [1, None, ["x"]]),
        (STRING_LIST, [[], ["a", "b"]], ["a", ["a", 1], {"a": "b"}]),
        (STRING_MAP, [{}, {"A": "1"}], [{"A": 1}, ["A"], "A=1"]),
        (REGEX, [r"step (?P<step>\d+)", ""], ["(", 5, "[a-"]),
        (integer(0, 10), [0, 10, 5], [-1, 11, 2.0, True, "3", *NOT_FINITE]),
        (integer(minimum=2), [2, 10**30], [1, False, 2.5]),
        (number(0, 1), [0, 1, 0.5, 1.0], [-0.1, 1.01, True, "0.5", *NOT_FINITE]),
        (number(minimum=0), [0, 1e300], [-1e-9, math.inf, math.nan]),
        (positive_number(), [1e-9, 3], [0, -1, False, math.inf, math.nan]),
        (string(min_length=1), ["a"], ["", 1]),
        (string(min_length=1, max_length=3), ["a", "abc"], ["", "abcd"]),
        (choice(True, False, "auto"), [True, False, "auto"], [1, 0, "yes", None]),
        (choice("a", "b"), ["a", "b"], ["c", ["a"]]),
    ],
)
def test_each_check_takes_its_values_and_refuses_the_rest(
    check: Any, good: list[Any], bad: list[Any]
) -> None:
    for value in good:
        assert check.accepts(value), value
        assert check(value) == check.parse(value)
    for value in bad:
        assert not check.accepts(value), value
        with pytest.raises(Invalid):
            check.parse(value)


@pytest.mark.parametrize(
    ("check", "words"),
    [
        (integer(0, 2**31 - 1), "an integer from 0 to 2147483647"),
        (integer(1, 5), "an integer from 1 to 5"),
        (integer(minimum=0), "a non-negative integer"),
        (integer(minimum=1), "a positive integer"),
        (integer(minimum=2), "an integer of at least 2"),
        (integer(maximum=9), "an integer of at most 9"),
        (integer(), "an integer"),
        (number(0, 1), "a number from 0 to 1"),
        (number(0, 0.5), "a number from 0 to 0.5"),
        (number(0, 7 * 24 * 3600.0, unit="seconds"), "a number of seconds from 0 to 604800"),
        (number(minimum=0), "a non-negative number"),
        (positive_number(), "a positive number"),
        (string(min_length=1), "a non-empty string"),
        (string(min_length=1, max_length=9), "a string of 1 to 9 characters"),
        (choice("error", "warn", "off"), '"error", "warn" or "off"'),
        (choice(True, False, "auto"), 'true, false or "auto"'),
        (choice("only"), '"only"'),
        (BOOLEAN, "true or false"),
        (BOOLEAN.worded("a boolean"), "a boolean"),
    ],
)
def test_the_words_say_what_was_expected(check: Any, words: str) -> None:
    assert check.expected == words


def test_invalid_names_the_path_of_the_bad_field() -> None:
    with pytest.raises(Invalid) as caught:
        integer(minimum=1).parse(0, ("probe", "maxVramMb"))
    error = caught.value
    assert error.path == ("probe", "maxVramMb") and error.where == "probe.maxVramMb"
    assert error.message == str(error) == "`probe.maxVramMb` must be a positive integer"
    assert Invalid((), "a string").message == "must be a string"
    with pytest.raises(ValueError, match=r"^must be a non-empty string$"):
        string(min_length=1)("")
    assert Invalid(("args", 2), "a string").where == "args.2"


def test_conversions_optional_values_and_composition() -> None:
    assert isinstance(number(0, 1).parse(1), float) and positive_number().parse(2) == 2.0
    optional = integer(minimum=0).or_none()
    assert optional.accepts(None) and optional(None) is None and optional.parse(3) == 3
    assert not optional.accepts(-1) and optional.expected == "a non-negative integer"
    argv = one_of(
        string(min_length=1).map(lambda path: (path,)),
        list_of(string(min_length=1), min_length=1).map(tuple),
        expected="a path or a list",
    )
    assert argv.parse("py") == ("py",) and argv.parse(["py", "-3"]) == ("py", "-3")
    for bad in ([], [""], "", 3):
        assert not argv.accepts(bad)
    assert list_of(integer(minimum=0), min_length=1).expected.startswith("a list (not empty)")


def test_object_helpers() -> None:
    obj = {"id": "a", "extra": 1, "other": None, "z": 2}
    assert unknown_fields(obj, {"id", "other"}) == ["extra", "z"]
    assert missing_fields(obj, ("id", "other", "absent")) == ["other", "absent"]
    assert read_field(obj, "absent", STRING, "default") == "default"
    assert read_field(obj, "other", STRING, 7) == 7
    with pytest.raises(Invalid) as caught:
        read_field(obj, "extra", STRING, None, ("jobs", 0))
    assert caught.value.path == ("jobs", 0, "extra")


def test_finite_json_kind_and_shown() -> None:
    assert finite(2) == 2 and finite(0.5) == 0.5
    for value in (*NOT_FINITE, None, True, "1", [1], 10**400):
        assert finite(value) is None
    kinds = [(None, "null"), (True, "a boolean"), (1, "a number"), (1.5, "a number"), ("s", "a string")]
    for value, kind in kinds:
        assert json_kind(value) == kind
    assert json_kind([]) == "an array" and json_kind({}) == "an object"
    assert shown("x" * 100) == json.dumps("x" * 100)[:60] and shown({1}).startswith("{1}")


# -- the boundaries: the same checks, each framed in the words the contract and docs show ---------


def _params_error(parse: Any, raw: Any) -> str:
    with pytest.raises(InvalidParams) as caught:
        parse(raw)
    return str(caught.value)


def test_params_messages_are_the_documented_ones() -> None:
    assert "arena/start: field `id` is required" in _params_error(parse_start, {})
    assert "arena/start: params must be an object, not an array" in _params_error(parse_start, ["x"])
    assert "arena/start: params must be an object, not a string" in _params_error(parse_start, "x")
    assert "field `id` must be a string (a job id from the manifest)" in _params_error(parse_start, {"id": 5})
    resume = _params_error(parse_start, {"id": "t", "resume": 1})
    assert 'field `resume` must be true, false or "auto"' in resume
    assert "field `kill` must be a boolean" in _params_error(parse_stop, {"kill": "yes"})
    assert "field `limit` must be an integer from 1 to 2147483647" in _params_error(parse_logs, {"limit": 0})
    step = _params_error(parse_start, {"id": "t", "startStep": 2**70})
    assert "field `startStep` must be an integer from 0 to 2147483647" in step
    grace = _params_error(parse_stop, {"graceSeconds": math.inf})
    assert "field `graceSeconds` must be a number of seconds from 0 to 604800" in grace
    request = parse_start({"id": "t", "resume": None, "startStep": 3})
    assert request.resume == "auto" and request.start_step == 3 and request.approved is False


def test_settings_refuse_non_finite_numbers_and_name_the_key() -> None:
    settings, problems = parse_settings({"logs": {"notifyHz": math.nan}, "insights.gradWindow": 1})
    assert settings.logs_notify_hz == 50.0 and settings.insights.grad_window == 10
    assert problems == [
        "arena.logs.notifyHz must be a positive number; using the default",
        "arena.insights.gradWindow must be an integer of at least 2; using the default",
    ]


def test_manifest_sections_report_unknown_keys_once(tmp_path: Path) -> None:
    job = {
        "id": "t",
        "command": "{python}",
        "status": "ready",
        "stop": {"method": "file", "graceSeconds": "soon", "when": 1},
        "restart": {"maxRestarts": -1, "backoffSeconds": math.inf},
        "kind": "nope",
    }
    text = json.dumps({"version": 1, "jobs": [job]})
    result = load_manifest_text(text, tmp_path / "manifest.json", tmp_path)
    messages = sorted(d.message for d in result.diagnostics if d.code == "AR102")
    assert messages == [
        '`kind` must be "train" or "task" (found "nope")',
        "`restart.backoffSeconds` must be a non-negative number",
        "`restart.maxRestarts` must be a non-negative integer",
        "`stop.graceSeconds` must be a non-negative number",
        "unknown field `stop.when` (ignored)",
    ]


def test_the_terminal_client_reads_its_numbers_with_the_same_checks() -> None:
    assert _count("12") == 12 and _seconds("1.5") == 1.5 and isinstance(_seconds("2"), float)
    for parse, text, words in [
        (_count, "-1", "'-1' is not a non-negative integer"),
        (_count, "x", "'x' is not a non-negative integer"),
        (_seconds, "inf", "'inf' is not a number of seconds >= 0"),
        (_seconds, "nan", "'nan' is not a number of seconds >= 0"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError, match=words):
            parse(text)
