"""The manifest loader's diagnostics and positions, the settings boundary, the state machine."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import attrs
import pytest

from arena_ls.manifest import load_manifest_text
from arena_ls.run.states import (
    LEGAL_MOVES,
    IllegalTransition,
    RunStatus,
    passed_through,
    stop_on_the_way,
    transition,
)
from arena_ls.settings import ClusterSettings, Settings, parse_settings


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    (tmp_path / "train.py").write_text("print('hi')\n")
    return load_manifest_text(text, tmp_path / "manifest.json", tmp_path)


def codes(result) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(d.code for d in result.diagnostics)


def test_defaults_follow_the_contract(tmp_path: Path) -> None:
    text = json.dumps(
        {
            "version": 1,
            "jobs": [
                {
                    "id": "t",
                    "command": "{python}",
                    "kind": "train",
                    "args": ["train.py"],
                    "resume": {"args": ["--s", "{step}"]},
                }
            ],
        }
    )
    result = load(tmp_path, text)
    job = result.jobs["t"]
    assert job.status == "approval-required" and job.script == "train.py"
    assert job.max_restarts == 3 and job.backoff_seconds == 5 and job.grace_seconds == 120
    assert job.stop_method == "file" and job.cwd == "."
    assert job.argv(["py", "-3.10"]) == ["py", "-3.10", "train.py"]
    assert codes(result) == ["AR109"]


def test_a_syntax_error_is_ar101_at_its_position(tmp_path: Path) -> None:
    result = load(tmp_path, '{\n  "version": 1,\n  "jobs": [\n    {"id": "a",,}\n')
    assert result.fatal and codes(result) == ["AR101"]
    assert result.diagnostics[0].span.line == 3


def test_each_problem_sits_on_its_value(tmp_path: Path) -> None:
    text = (
        '{"version": 1, "stagez": [], "jobs": [\n'
        ' {"id": "a", "command": "python3", "kind": "train", "args": ["train.py"],'
        ' "env": {"PYTHONPATH": "x"}},\n'
        ' {"id": "a", "command": "{python}"},\n'
        ' {"id": "b", "command": "{python}", "cwd": "../elsewhere"},\n'
        ' {"id": "c", "command": "{python}", "script": "missing.py", "status": "ready"},\n'
        ' {"id": "d", "command": "{python}", "args": "not-a-list", "status": "ready", "surprise": 1}\n'
        "]}"
    )
    result = load(tmp_path, text)
    assert codes(result) == sorted(
        [
            "AR102",
            "AR104",
            "AR105",
            "AR106",
            "AR103",
            "AR109",
            "AR109",
            "AR110",
            "AR109",
            "AR107",
            "AR102",
            "AR102",
        ]
    )
    by_code = {d.code: d for d in result.diagnostics}
    assert by_code["AR104"].span.line == 1 and by_code["AR103"].span.line == 2
    assert by_code["AR110"].span.line == 3 and by_code["AR107"].span.line == 4
    assert not result.fatal and set(result.all_ids) == {"a", "b", "c", "d"}
    assert "a" not in result.jobs and "d" not in result.jobs
    unknown = [d for d in result.diagnostics if "unknown" in d.message]
    assert {d.severity for d in unknown} == {"warning"}


def test_a_missing_trainer_named_in_args_is_not_called_a_script_field(tmp_path: Path) -> None:
    """Regression (issue 38): a job with no ``script`` field was told "`script` 'training/ghost.py'"."""
    ghost = {"id": "g", "command": "{python}", "kind": "train", "status": "ready"}
    for where, said in [
        ({"args": ["training/ghost.py"]}, "the trainer 'training/ghost.py' (from `args`) does not exist"),
        ({"script": "training/ghost.py"}, "`script` 'training/ghost.py' does not exist"),
    ]:
        text = json.dumps({"version": 1, "jobs": [{**ghost, **where}]})
        [missing] = [d for d in load(tmp_path, text).diagnostics if d.code == "AR107"]
        assert missing.message == said


def test_half_typed_manifests_never_raise(tmp_path: Path) -> None:
    text = '{"version": 1, "jobs": [{"id": "a", "command": "{python}", "stop": {"method": "sometimes"}}]}'
    for cut in range(len(text) + 1):
        load(tmp_path, text[:cut])


def test_settings_bad_values_are_reported_and_defaulted() -> None:
    settings, problems = parse_settings(
        {"arena": {"preflight": {"minFreeRamMb": "lots", "gpuContention": "warn"}, "python": ["py", "-3.10"],
                   "logs.notifyHz": 0, "device": {"fp32Only": True}, "watchdog": {"stallSeconds": 30}}}
    )  # fmt: skip
    assert settings.preflight.min_free_ram_mb == 5120 and settings.preflight.gpu_contention == "warn"
    assert settings.python == ("py", "-3.10") and settings.device_fp32_only is True
    assert settings.logs_notify_hz == Settings().logs_notify_hz and settings.watchdog_stall_seconds == 30
    assert len(problems) == 2 and any("minFreeRamMb" in p for p in problems)
    assert parse_settings([1, 2])[1] and parse_settings(None) == (Settings(), [])


@pytest.mark.parametrize(
    "options",
    [
        [],
        {"arena": []},
        {"preflight": []},
        {"clusters": []},
        {"clusters": {"lab": []}},
        {"arena": {"probe": []}},
    ],
)
def test_an_empty_array_is_an_empty_object_as_neovim_sends_it(options: object) -> None:
    """Neovim encodes an empty Lua table (``clusters = {}``) as ``[]``: no warning, the defaults."""
    settings, problems = parse_settings(options)
    assert problems == []
    named = (("lab", ClusterSettings()),) if options == {"clusters": {"lab": []}} else ()
    assert settings == attrs.evolve(Settings(), clusters=named)


def test_the_state_machine_rejects_illegal_moves() -> None:
    assert transition("r", RunStatus.RUNNING, RunStatus.STOPPING) is RunStatus.STOPPING
    for final in (RunStatus.STOPPED, RunStatus.SUCCEEDED, RunStatus.CRASHED, RunStatus.LOST):
        assert final.is_final and not LEGAL_MOVES[final]
        with pytest.raises(IllegalTransition):
            transition("r", final, RunStatus.RUNNING)
    with pytest.raises(IllegalTransition):
        transition("r", RunStatus.STARTING, RunStatus.RESTARTING)


@pytest.mark.parametrize(
    ("before", "after", "between"),
    [
        (RunStatus.RUNNING, RunStatus.STOPPED, [RunStatus.STOPPING]),  # a stop quicker than one poll
        (RunStatus.STARTING, RunStatus.SUCCEEDED, [RunStatus.RUNNING]),
        (RunStatus.STARTING, RunStatus.STOPPING, [RunStatus.RUNNING]),
        (RunStatus.STARTING, RunStatus.RESTARTING, [RunStatus.RUNNING]),
        (RunStatus.RUNNING, RunStatus.CRASHED, []),  # legal: nothing in between
        (RunStatus.RUNNING, RunStatus.RUNNING, []),
        (None, RunStatus.STOPPED, []),  # nothing announced yet (an adopted run)
        (RunStatus.STOPPED, RunStatus.RUNNING, []),  # no legal way back: nothing invented
    ],
)
def test_the_statuses_a_run_passed_through_between_two_readings(
    before: RunStatus | None, after: RunStatus, between: list[RunStatus]
) -> None:
    assert passed_through(before, after) == between
    route = [before, *between, after]
    if before is not None and between:
        assert all(b in LEGAL_MOVES[a] for a, b in itertools.pairwise(route)), route


R = RunStatus


@pytest.mark.parametrize(
    ("before", "after", "relaunches", "between"),
    [
        (R.RUNNING, R.RUNNING, 1, [R.RESTARTING]),  # a relaunch quicker than one poll
        (R.RUNNING, R.RUNNING, 2, [R.RESTARTING, R.RUNNING, R.RESTARTING]),
        (R.RUNNING, R.RESTARTING, 1, []),  # legal, and the one relaunch is the one read
        (R.RUNNING, R.RESTARTING, 2, [R.RESTARTING, R.RUNNING]),
        (R.RESTARTING, R.RUNNING, 0, []),  # restarts counts the entry into restarting
        (R.RESTARTING, R.RUNNING, 1, [R.RUNNING, R.RESTARTING]),
        (R.STARTING, R.RUNNING, 1, [R.RUNNING, R.RESTARTING]),
        (R.RUNNING, R.CRASHED, 1, [R.RESTARTING]),  # relaunched, then crashed again
        (R.RUNNING, R.STOPPED, 1, [R.RESTARTING]),  # stopped during the backoff
        (R.RUNNING, R.RUNNING, 0, []),
        (R.RUNNING, R.RUNNING, -1, []),  # restarts never goes down: nothing invented
        (None, R.RUNNING, 3, []),  # nothing announced yet (an adopted run)
        (R.STOPPED, R.RUNNING, 1, []),  # no legal way: nothing invented
    ],
)
def test_a_relaunch_between_two_readings_is_filled_in(
    before: RunStatus | None, after: RunStatus, relaunches: int, between: list[RunStatus]
) -> None:
    assert passed_through(before, after, relaunches) == between
    if before is not None and between:
        route = [before, *between, after]
        assert all(b in LEGAL_MOVES[a] for a, b in itertools.pairwise(route)), route
        entered = sum(status is R.RESTARTING for status in route[1:])
        assert entered == relaunches, route


@pytest.mark.parametrize(
    ("before", "after", "between"),
    [
        (R.RUNNING, R.RESTARTING, [R.STOPPING]),  # a battery stop whose stopping no reading caught
        (R.STARTING, R.RESTARTING, [R.RUNNING, R.STOPPING]),
        (R.STOPPING, R.RESTARTING, []),  # its stopping was read and announced
        (R.RESTARTING, R.RESTARTING, []),  # the same status read again (waitingFor changed)
        (None, R.RESTARTING, []),  # nothing announced yet
    ],
)
def test_a_stop_the_state_records_is_passed_through(
    before: RunStatus | None, after: RunStatus, between: list[RunStatus]
) -> None:
    """A ``restarting`` state with ``stoppedBy`` (a battery stop waiting for power) was ``stopping``
    first: a loaded server that read ``running`` and then ``restarting`` still announces it."""
    assert stop_on_the_way(after, "battery") is (R.STOPPING if after is R.RESTARTING else None)
    assert passed_through(before, after, 0, stop_on_the_way(after, "battery")) == between
    if before is not None and between:
        route = [before, *between, after]
        assert all(b in LEGAL_MOVES[a] for a, b in itertools.pairwise(route)), route


@pytest.mark.parametrize(
    ("after", "stopped_by"), [(R.RESTARTING, None), (R.STOPPED, "user"), (R.RUNNING, "battery")]
)
def test_only_a_restarting_state_that_records_a_stop_was_stopped_on_the_way(
    after: RunStatus, stopped_by: str | None
) -> None:
    """A crash's relaunch (no ``stoppedBy``) goes ``running`` to ``restarting`` directly."""
    assert stop_on_the_way(after, stopped_by) is None
    assert passed_through(R.RUNNING, R.RESTARTING, 1, stop_on_the_way(R.RESTARTING, None)) == []


def test_the_relaunches_filled_in_are_bounded() -> None:
    """A server that slept through many relaunches does not flood the client with invented ones."""
    from arena_ls.run.states import MOST_RELAUNCHES_FILLED

    between = passed_through(R.RUNNING, R.RUNNING, 10_000)
    assert between.count(R.RESTARTING) == MOST_RELAUNCHES_FILLED
