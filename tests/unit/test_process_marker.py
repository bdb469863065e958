"""The ``process`` marker (tests/helpers/process_marker.py): set by what a test's code can reach,
and enforced, so that ``pytest -m "not process"`` never starts a process in silence.

The marking is checked on a pytester suite collected in-process (nothing is started); the
guard on one that starts processes in ways no reading of the code can see (which makes those
tests process tests themselves: they are marked explicitly, as the guard asks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.process_marker import Reach

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
markers = process: starts a process
"""

CONFTEST = """
import subprocess

import pytest

from tests.helpers import process_marker


def pytest_configure(config):
    process_marker.register(config)


@pytest.fixture
def child():
    return subprocess.Popen(["true"])


@pytest.fixture
def uses_child(child):
    return child


@pytest.fixture
def torch():
    return "PyTorch itself is not imported here: the fixture's name is what marks"
"""

MARKED_SUITE = """
import os
import subprocess
import sys

import pytest

from tests.helpers.lsp import make_workspace, start_server


async def test_starts_a_server(tmp_path):
    await start_server(tmp_path)


def _helper():
    subprocess.run(["true"], check=True)


def test_calls_a_helper_that_runs_a_command():
    _helper()


def test_uses_a_fixture_that_uses_a_fixture_that_starts_a_child(uses_child):
    pass


CASES = {"a": lambda: subprocess.check_output(["true"]), "b": lambda: None}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_table_of_cases_one_of_which_runs_a_command(case):
    CASES[case]()


class Runner:
    def go(self):
        os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], os.environ)


def test_calls_a_method_of_a_local_instance():
    runner = Runner()
    runner.go()


class TestGrouped:
    def _spawn(self):
        os.fork()

    def test_calls_its_own_method(self):
        self._spawn()


@pytest.mark.process
def test_marked_by_hand():
    pass


def test_pure_arithmetic():
    assert 1 + 1 == 2


def test_loads_a_training_framework_in_process(torch):
    assert torch


def test_mentions_a_process_only_in_an_annotation() -> None:
    value: subprocess.Popen[str] | None = None
    assert value is None


def test_builds_a_workspace_with_a_helper_that_starts_nothing(tmp_path):
    make_workspace(tmp_path / "ws", [])


def test_builds_a_runner_without_running_it():
    assert Runner() is not None


class Keeper:
    def __init__(self, spawn=_helper):
        self.spawn = spawn


def test_hands_a_fake_in_place_of_a_default_that_starts_a_process():
    assert Keeper(spawn=lambda: None).spawn() is None
"""

EXPECTED_MARKED = {
    "test_starts_a_server",
    "test_calls_a_helper_that_runs_a_command",
    "test_uses_a_fixture_that_uses_a_fixture_that_starts_a_child",
    "test_a_table_of_cases_one_of_which_runs_a_command[a]",
    "test_a_table_of_cases_one_of_which_runs_a_command[b]",
    "test_calls_a_method_of_a_local_instance",
    "test_calls_its_own_method",
    "test_marked_by_hand",
    "test_loads_a_training_framework_in_process",
}
EXPECTED_FAST = {
    "test_pure_arithmetic",
    "test_mentions_a_process_only_in_an_annotation",
    "test_builds_a_workspace_with_a_helper_that_starts_nothing",
    "test_builds_a_runner_without_running_it",
    "test_hands_a_fake_in_place_of_a_default_that_starts_a_process",
}


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)


def test_the_tests_that_can_reach_a_process_start_are_marked_and_no_other(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makepyfile(test_marked=MARKED_SUITE)
    items, _ = pytester.inline_genitems()
    marked = {item.name for item in items if item.get_closest_marker("process")}
    assert marked == EXPECTED_MARKED
    assert {item.name for item in items} - marked == EXPECTED_FAST


def test_the_mark_says_why(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makepyfile(test_marked=MARKED_SUITE)
    items, _ = pytester.inline_genitems()
    why = {
        item.name: item.get_closest_marker("process").kwargs.get("auto")
        for item in items
        if item.get_closest_marker("process")
    }  # type: ignore[union-attr]
    assert why["test_starts_a_server"].endswith("start_server -> .start_io()")
    assert why["test_uses_a_fixture_that_uses_a_fixture_that_starts_a_child"].startswith("fixture ")
    assert why["test_uses_a_fixture_that_uses_a_fixture_that_starts_a_child"].endswith(
        "child -> subprocess.Popen"
    )
    assert why["test_marked_by_hand"] is None, "a mark written by hand is left as it is"
    assert why["test_loads_a_training_framework_in_process"] == (
        "loads a training framework into the test's own process (fixture torch)"
    ), "as slow as a process test: PyTorch's import, in this process"


def test_not_process_deselects_the_marked_tests_before_they_run(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    pytester.makepyfile(test_marked=MARKED_SUITE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-m", "not process")
    result.assert_outcomes(passed=len(EXPECTED_FAST), deselected=len(EXPECTED_MARKED))


def test_the_suites_helpers_are_followed() -> None:
    reach = Reach()

    def spawns(name: str) -> bool:
        target = reach.resolve(name)
        assert target is not None, name
        return reach.spawn_path(target) is not None

    assert spawns("tests.helpers.lsp.start_server")
    assert spawns("tests.conftest.ray_head")
    assert not spawns("tests.helpers.lsp.make_workspace")
    assert not spawns("tests.helpers.lsp.wait_for")
    assert not spawns("tests.helpers.fake_dashboard.fake_dashboard")


# -- the guard: a start the reading cannot see fails the test -------------------------------------

HIDDEN_STARTS = {
    "subprocess": """
    getattr(importlib.import_module("subprocess"), "run")([sys.executable, "-c", "pass"], check=True)
""",
    "asyncio": """
    async def main():
        process = await getattr(asyncio, "create_subprocess_exec")(sys.executable, "-c", "pass")
        await process.wait()
    asyncio.run(main())
""",
    "fork": """
    pid = getattr(os, "fork")()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
""",
    "posix_spawn": """
    pid = getattr(os, "posix_spawn")(sys.executable, [sys.executable, "-c", "pass"], dict(os.environ))
    os.waitpid(pid, 0)
""",
    "multiprocessing": """
    context = importlib.import_module("multiprocessing").get_context("spawn")
    child = context.Process(target=print)
    child.start()
    child.join()
""",
    "a start that fails and is swallowed": """
    try:
        getattr(importlib.import_module("subprocess"), "run")(["/nonexistent/arena-no-such-program"])
    except OSError:
        pass
""",
}

PRELUDE = "import asyncio, importlib, os, sys\nimport pytest\n\n"


def _hidden(body: str, name: str = "test_hidden", decorator: str = "") -> str:
    return f"{PRELUDE}{decorator}def {name}():{body}"


@pytest.mark.process
@pytest.mark.parametrize("how", sorted(HIDDEN_STARTS))
def test_an_unmarked_test_that_starts_a_process_fails_saying_to_mark_it(
    pytester: pytest.Pytester, how: str
) -> None:
    _suite(pytester)
    pytester.makepyfile(test_hidden=_hidden(HIDDEN_STARTS[how]))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*test_hidden started a process but is not marked `process`:*", "*Mark it `@pytest.mark.process`*"]
    )
    result.stdout.fnmatch_lines(["*test_hidden.py:* (test_hidden)*"])


@pytest.mark.process
def test_a_test_marked_by_hand_may_start_a_process(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    body = HIDDEN_STARTS["subprocess"]
    pytester.makepyfile(test_hidden=_hidden(body, decorator="@pytest.mark.process\n"))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.process
def test_a_start_in_a_fixture_set_up_or_tear_down_fails_the_test(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    start = 'getattr(importlib.import_module("subprocess"), "run")([sys.executable, "-c", "pass"])'
    pytester.makepyfile(
        test_hidden=f"{PRELUDE}"
        f"@pytest.fixture\ndef before():\n    {start}\n\n"
        f"@pytest.fixture\ndef after():\n    yield\n    {start}\n\n"
        "def test_set_up(before):\n    pass\n\n"
        "def test_tear_down(after):\n    pass\n"
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=2)  # the tear-down error comes after test_tear_down passed
    result.stdout.fnmatch_lines(["*test_set_up started a process but is not marked*"])
    result.stdout.fnmatch_lines(["*test_tear_down started a process but is not marked*"])


@pytest.mark.process
def test_the_audit_records_what_each_test_started(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    audit = tmp_path / "audit.jsonl"
    monkeypatch.setenv("ARENA_PROCESS_AUDIT", str(audit))
    _suite(pytester)
    pytester.makepyfile(
        test_hidden=_hidden(HIDDEN_STARTS["subprocess"], "test_marked", "@pytest.mark.process\n")
        + "\n\ndef test_pure():\n    pass\n"
    )
    pytester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)
    records = {r["test"].rsplit("::", 1)[1]: r for r in map(json.loads, audit.read_text().splitlines())}
    assert records["test_marked"]["marked"] and records["test_marked"]["started"]
    assert records["test_pure"] == {
        "test": records["test_pure"]["test"],
        "marked": False,
        "why": None,
        "started": [],
    }
