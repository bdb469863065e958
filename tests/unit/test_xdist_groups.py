"""The groups of tests that share a worker under ``pytest -n`` (tests/helpers/xdist_groups.py).

The grouping is checked on a pytester suite collected in-process (nothing is started); one
test runs that suite on two real xdist workers and shows what the groups are for: a Ray head
fixture and a module fixture are each built once, on one worker.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("xdist", reason="the parallel suite needs pytest-xdist (the test extra)")

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
markers = process: starts a process
"""

CONFTEST = """
import json
import os

import pytest

from tests.helpers import xdist_groups


def pytest_configure(config):
    xdist_groups.register(config)


def _note(name):
    with open(os.environ["BUILT_LOG"], "a") as log:
        log.write(json.dumps([name, os.environ.get("PYTEST_XDIST_WORKER", "main")]) + "\\n")


@pytest.fixture(scope="package")
def ray_head():
    _note("ray_head")
    return "head"


@pytest.fixture(scope="session")
def everywhere():
    return "built once per worker"
"""

SUITE = """
import pytest

@pytest.fixture(scope="module")
def template():
    from conftest import _note

    _note("template")
    return "template"


def test_on_the_head(ray_head):
    assert ray_head == "head"


def test_on_the_head_again(ray_head):
    assert ray_head == "head"


def test_on_the_template(template):
    assert template


def test_on_the_template_again(template):
    assert template


def test_on_the_head_and_a_session_fixture(ray_head, everywhere):
    pass


@pytest.mark.xdist_group("my-port")
def test_with_an_explicit_group():
    pass


def test_alone(everywhere, tmp_path):
    pass


def test_alone_too():
    pass
"""


FRAMEWORKS = """
import os

import pytest

from conftest import _note


@pytest.fixture(scope="module")
def torch():
    return "a stand-in: this module's own fixture of that name, as tests/trainer's modules have"


@pytest.fixture
def train_module():
    return "another module's import of PyTorch"


def test_imports_pytorch(torch):
    _note("frameworks:" + os.environ.get("PYTEST_XDIST_WORKER", "main"))


def test_imports_the_reference_trainer(train_module):
    _note("frameworks:" + os.environ.get("PYTEST_XDIST_WORKER", "main"))
"""

LIGHTNING = """
import os

import pytest

from conftest import _note


@pytest.fixture(scope="module", autouse=True)
def lightning_pytorch():
    return "a stand-in"


def test_imports_lightning():
    _note("frameworks:" + os.environ.get("PYTEST_XDIST_WORKER", "main"))
"""


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    # Test modules named under tests/ so that their fixtures count as this repository's.
    package = pytester.mkpydir("tests_suite")
    (package / "test_grouped.py").write_text(SUITE)
    (package / "test_frameworks.py").write_text(FRAMEWORKS)
    (package / "test_lightning.py").write_text(LIGHTNING)


def _groups(items: list[pytest.Item]) -> dict[str, list[str]]:
    return {item.name: [str(mark.args[0]) for mark in item.iter_markers("xdist_group")] for item in items}


def test_each_test_gets_the_group_of_what_it_shares(pytester: pytest.Pytester) -> None:
    _suite(pytester)
    items, _ = pytester.inline_genitems()
    module = "module:tests_suite/test_grouped.py::template"
    assert _groups(items) == {
        "test_on_the_head": ["ray-head"],
        "test_on_the_head_again": ["ray-head"],
        "test_on_the_template": [module],
        "test_on_the_template_again": [module],
        "test_on_the_head_and_a_session_fixture": ["ray-head"],
        "test_with_an_explicit_group": ["my-port"],
        "test_alone": [],
        "test_alone_too": [],
        "test_imports_pytorch": ["frameworks-in-process"],
        "test_imports_the_reference_trainer": ["frameworks-in-process"],
        "test_imports_lightning": ["frameworks-in-process"],
    }


def test_a_wide_fixture_from_outside_the_repository_groups_nothing(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A plugin's module-scoped fixture (installed, not this repository's) is not grouped on."""
    elsewhere = tmp_path_factory.mktemp("site")
    (elsewhere / "outside_plugin.py").write_text(
        "import pytest\n\n@pytest.fixture(scope='module')\ndef shared_by_a_plugin():\n    return 1\n"
    )
    pytester.syspathinsert(elsewhere)
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_plugin="def test_uses_it(shared_by_a_plugin):\n    pass\n")
    items, _ = pytester.inline_genitems("-p", "outside_plugin")
    assert _groups(items) == {"test_uses_it": []}


@pytest.mark.process  # two xdist workers
@pytest.mark.parametrize("dist", [[], ["--dist", "loadgroup"]], ids=["plain", "loadgroup"])
def test_on_two_workers_each_shared_fixture_is_built_once(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: list[str]
) -> None:
    _suite(pytester)
    built = tmp_path / "built.jsonl"
    monkeypatch.setenv("BUILT_LOG", str(built))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-v", *dist)
    result.assert_outcomes(passed=11)
    notes = [json.loads(line) for line in built.read_text().splitlines()]
    fixtures_built = sorted(name for name, _ in notes if not name.startswith("frameworks:"))
    assert fixtures_built == ["ray_head", "template"], notes
    frameworks_workers = {name for name, _ in notes if name.startswith("frameworks:")}
    assert len(frameworks_workers) == 1, f"the framework-importing tests ran on {frameworks_workers}"
    result.stdout.fnmatch_lines(["*scheduling tests via GroupScheduling*"])
