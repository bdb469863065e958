"""Which tests share a worker when the suite runs in parallel (``pytest -n 3``, pytest-xdist).

Set at collection, nothing to write in a test, so that tests added later are grouped too:

- **A machine-wide resource**: a test that uses a fixture of ``RESOURCE_FIXTURES`` joins that
  resource's group (every test on the ``ray_head`` fixture runs on one worker: one Ray head at a
  time on the machine, about 0.7 GiB and some idle CPU each, as without xdist).
- **A framework imported into the worker**: a test that uses a fixture of ``IN_PROCESS_FRAMEWORKS``
  (PyTorch, transformers, Lightning, imported by the test's own process) joins one group, so that
  one worker pays the seconds of those imports (PyTorch 2-3 s of CPU, Lightning 3 s more) and
  holds their memory, not each worker that happens to get such a test.
- **A fixture wider than a test**: the tests that share a module-, class- or package-scoped
  fixture of this repository run on one worker, so that it is built once (the damage template of
  ``tests/lifecycle/test_races_and_damage.py`` runs the real agent twice). A session-scoped
  fixture is left alone: grouping on it would put the whole suite on one worker; under xdist it
  is built once per worker, so it must not hold a machine-wide resource (use a group for that).
- **An explicit** ``@pytest.mark.xdist_group("name")`` is kept as written: a test that needs a
  machine-wide resource the fixtures above do not name (a fixed port, a file outside its
  ``tmp_path``) declares it so (see CONTRIBUTING.md, "The parallel suite").

A test is in one group at most: the explicit one, else the resource's, else the first wide
fixture by name (xdist would join several names into a new group of their own, which would
split the tests that share one of them).

``pytest -n N`` (``--dist load``, the default) and ``--dist loadgroup`` both schedule by these
groups (the tests without one are balanced one by one, as ``load`` does); another ``--dist``
given by hand is left as asked.
"""

from __future__ import annotations

import functools
import inspect
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

GROUP_MARKER = "xdist_group"
RESOURCE_FIXTURES: dict[str, str] = {"ray_head": "ray-head"}
"""Fixture name -> the group of every test that uses it (one resource per machine at a time)."""
IN_PROCESS_FRAMEWORKS: dict[str, str] = {
    name: "frameworks-in-process" for name in ("torch", "train_module", "transformers", "lightning_pytorch")
}
"""Fixture name -> the group of every test that uses it: the fixtures that import PyTorch (the
trainer kit's tests, the reference trainer's module) or transformers and Lightning (the kit's
adapters) into the test's own process."""
GROUPED_SCOPES = ("module", "class", "package")
_TABLES = "arena_xdist_group_tables"
"""The key, in what each worker is handed (``workerinput``), of the folder of group tables."""


def _ours(function: object, root: Path) -> bool:
    """Whether a fixture is this repository's (a plugin's, installed in the venv, is not)."""
    try:
        source = inspect.getsourcefile(inspect.unwrap(function))  # type: ignore[arg-type]
    except TypeError:
        return False
    if not source:
        return False
    path = Path(source).resolve()
    return path.is_relative_to(root) and not path.is_relative_to(_resolved(Path(sys.prefix)))


@functools.cache
def _resolved(path: Path) -> Path:
    """``path.resolve()`` once per run, not once per test (its system calls, 2,800 times)."""
    return path.resolve()


def _wide_fixture_group(item: pytest.Item) -> str | None:
    """The group of the first fixture of this repository wider than a test, or None."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    root = _resolved(item.config.rootpath)
    for name in sorted(info.name2fixturedefs):
        definition = info.name2fixturedefs[name][-1]  # the one this test gets (the closest)
        if definition.scope not in GROUPED_SCOPES or not _ours(definition.func, root):
            continue
        return f"{definition.scope}:{_instance_of(item, definition)}::{name}"
    return None


def _instance_of(item: pytest.Item, definition: pytest.FixtureDef[Any]) -> str:
    """Where the instance ``item`` gets lives: its package (where the fixture is defined), or
    its module or class (a module-scoped fixture of a conftest is built once per module)."""
    if definition.scope == "package":
        return str(definition.baseid)
    parent = item.getparent(pytest.Class) if definition.scope == "class" else None
    node = parent or item.getparent(pytest.Module)
    return node.nodeid if node is not None else ""


def group_of(item: pytest.Item) -> str | None:
    """The xdist group ``item`` must run in (see the module docstring), or None."""
    if item.get_closest_marker(GROUP_MARKER) is not None:
        return None  # explicit: kept as written
    for fixture, group in {**RESOURCE_FIXTURES, **IN_PROCESS_FRAMEWORKS}.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    return _wide_fixture_group(item)


class XdistGroups:
    """Adds the groups at collection (each worker) and schedules by them (the controller).

    pytest-xdist's own ``--dist loadgroup`` passes a test's group to the controller by renaming
    the test (``id@group``), which pytest 9.2's structured node ids silently undo (pytest-xdist
    issue 1386: every test then runs wherever). So the groups travel as a file instead: each
    worker writes ``{test id: group}`` at collection, before it reports its collection, and the
    controller's scheduler (xdist's scope scheduling, a group being a scope) reads it.
    """

    def __init__(self) -> None:
        self._table_dir: Path | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Before ``-m`` deselects and before xdist's worker reads the markers."""
        groups: dict[str, str] = {}
        for item in items:
            group = group_of(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
            marker = item.get_closest_marker(GROUP_MARKER)
            if marker is not None:
                groups[item.nodeid] = str(
                    marker.args[0] if marker.args else marker.kwargs.get("name", "default")
                )
        worker = getattr(config, "workerinput", None)
        if worker is not None and worker.get(_TABLES):
            table = Path(worker[_TABLES]) / f"{worker['workerid']}.json"
            partial = table.with_suffix(".partial")
            partial.write_text(json.dumps(groups), encoding="utf-8")
            partial.replace(table)

    def pytest_configure_node(self, node: Any) -> None:
        """(The controller, for each worker it starts: where to write the table.)"""
        if self._table_dir is None:
            self._table_dir = Path(tempfile.mkdtemp(prefix="arena-xdist-groups-"))
        node.workerinput[_TABLES] = str(self._table_dir)

    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") not in ("load", "loadgroup") or self._table_dir is None:
            return None  # an explicit --dist loadscope, loadfile, worksteal, each: as asked
        return _group_scheduling(config, log, self._table_dir)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._table_dir is not None:
            shutil.rmtree(self._table_dir, ignore_errors=True)


def _group_scheduling(config: pytest.Config, log: Any, tables: Path) -> Any:
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """xdist's scope scheduling where a scope is a group, and a test without one is its own."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:  # every worker has collected (and so written) by now
                self._groups = {}
                for table in sorted(tables.glob("*.json")):
                    self._groups.update(json.loads(table.read_text(encoding="utf-8")))
            group = self._groups.get(nodeid)
            if group is None and nodeid.rfind("@") > nodeid.rfind("]"):  # renamed by xdist itself
                group = self._groups.get(nodeid.rpartition("@")[0], nodeid.rpartition("@")[2])
            return f"@{group}" if group is not None else nodeid

    return GroupScheduling(config, log)


def register(config: pytest.Config) -> None:
    """Called from ``tests/conftest.py``'s ``pytest_configure``; does nothing without pytest-xdist."""
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistGroups(), "arena-xdist-groups")
