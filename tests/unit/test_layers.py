"""The floors of the house: every package imports only its own room and the floors below it.

``FLOORS`` is the house, bottom first (``docs/architecture.md`` shows it).
A floor holds rooms; a room is a package or a top-level module of
``arena_ls``. A module may import its own room and any room on a lower
floor, never a room beside it or above it: so no arrow points up, and no
circle between rooms can exist (a circle needs an arrow that does not
point down).

The run's code is split by the process that runs it (issue 38): ``run``
(the run folder on disk, which every process reads) < ``health`` (the
hardware; its pre-flight makes the state folder, so it may import ``run``,
never an agent) < ``agent`` (the job agent and what the cluster agent
shares with it; it reads the hardware) < ``lifecycle`` (the server's side:
the supervisor, the follower, the views of a run). ``cluster`` is a floor
above ``lifecycle``: the Ray back end and the cluster's agent build on
it, which never knows of them.
    [("trainer_facts",)],

Every import statement counts, including ones inside functions and under
``TYPE_CHECKING``: a lower package that needs a higher one is in the
wrong room, however the import is hidden. (Circles between modules inside
one room are ``test_import_graph.py``'s.)
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.helpers.sources import nodes, parsed

pytestmark = pytest.mark.xdist_group("sources")  # one worker parses them once (helpers/sources.py)

PACKAGE = Path(__file__).resolve().parents[2] / "arena_ls"
LOWER = [
    "run",
    "agent",
    "lifecycle",
    "gates",
    "trainer_facts",
    "health",
    "manifest",
    "insights",
    "cluster",
    "services",
    "platform",
    "settings.py",
    "setting_sections.py",
    "errors.py",
]
UPPER = ("arena_ls.protocol", "arena_ls.client")

FLOORS: list[list[tuple[str, ...]]] = [
    [
        ("__init__",),
        ("validation",),
        ("uris",),
        ("timeutil",),
        ("errors",),
        ("platform", "platform_awake", "platform_notify"),
        ("docgen",),
        ("wording",),
    ],
    [("setting_decl",), ("loopcheck",), ("wording_gen",), ("codecache",)],
    [("settings", "setting_sections"), ("diagnostics",)],
    [("manifest",), ("settings_schema",)],
    [("run",)],
    [("health",)],
    [("agent",)],
    [("lifecycle",)],
    [("trainer_facts",)],
    [("gates",), ("insights",), ("cluster",)],
    [("services",)],
    [("protocol",), ("client",)],
    [("__main__",)],
]
"""The floors of ``arena_ls``, bottom first; each floor's rooms (a room: the packages in it)."""


def imported_modules(path: Path, root: Path = PACKAGE.parent) -> list[tuple[int, str]]:
    """(line, module) for every import in ``path``; relative imports resolved against its package."""
    stat = path.stat()  # kept while the file is unchanged: the rules below ask for each file many times
    return list(_imported_modules(path, root, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=4096)
def _imported_modules(path: Path, root: Path, _mtime_ns: int, _size: int) -> tuple[tuple[int, str], ...]:
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in nodes(path):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return tuple(found)


def modules_of(entry: str) -> list[Path]:
    target = PACKAGE / entry
    return [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))


@pytest.mark.parametrize("entry", LOWER)
def test_a_lower_package_never_imports_the_protocol_layer_or_the_client(entry: str) -> None:
    files = modules_of(entry)
    assert files, f"arena_ls/{entry} has no modules: the layer list is out of date"
    offending = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if module.startswith(UPPER)
    ]
    assert offending == []


def test_the_checker_sees_hidden_and_relative_imports(tmp_path: Path) -> None:
    """The test above can fail: imports inside functions and relative ones are found."""
    probe = tmp_path / "arena_ls" / "lifecycle" / "x.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("def f():\n    from arena_ls.protocol import server\n    from ..client import cli\n")
    modules = [module for _, module in imported_modules(probe, root=tmp_path)]
    assert modules == ["arena_ls.protocol.server", "arena_ls.client.cli"]


def room_of(module: str, floors: list[list[tuple[str, ...]]]) -> tuple[int, tuple[str, ...]] | None:
    """(floor, room) of ``arena_ls.X...``; a name ``arena_ls/__init__.py`` defines is its room."""
    parts = module.split(".")
    if parts[0] != "arena_ls":
        return None
    name = parts[1] if len(parts) > 1 else "__init__"
    name = "__init__" if name.startswith("__") and name != "__main__" else name
    for level, rooms in enumerate(floors):
        for room in rooms:
            if name in room:
                return level, room
    return None


def floor_violations(root: Path, floors: list[list[tuple[str, ...]]] = FLOORS) -> list[str]:
    """Every import under ``root/arena_ls`` that reaches its own floor's other rooms or a floor above
    (and every module no floor holds: the table is out of date)."""
    found: list[str] = []
    for path in sorted((root / "arena_ls").rglob("*.py")):
        where = path.relative_to(root)
        own = room_of(".".join(where.with_suffix("").parts), floors)
        if own is None:
            found.append(f"{where} is on no floor of FLOORS")
            continue
        for line, module in imported_modules(path, root=root):
            if module.split(".")[0] != "arena_ls":
                continue  # the standard library and third parties are on every floor
            target = room_of(module, floors)
            if target is None:
                found.append(f"{where}:{line} imports {module}, which is on no floor")
            elif target[1] != own[1] and target[0] >= own[0]:
                side = "beside it" if target[0] == own[0] else "above it"
                found.append(f"{where}:{line} imports {module} ({'/'.join(target[1])}, {side})")
    return found


def test_every_import_points_down_the_floors() -> None:
    """The general rule: a room imports only itself and lower floors (``cluster`` above ``lifecycle``)."""
    assert floor_violations(PACKAGE.parent) == []


def test_the_floor_checker_catches_an_arrow_from_lifecycle_to_cluster_and_a_circle(tmp_path: Path) -> None:
    """The rule can fail: an arrow up (lifecycle -> cluster, hidden in a function), a circle
    between two rooms of one floor (gates <-> insights), and a module no floor holds are named."""
    write = {
        "arena_ls/__init__.py": "",
        "arena_ls/cluster/backend.py": "from arena_ls.lifecycle.backends.base import RunPlan\n",
        "arena_ls/lifecycle/supervisor.py": (
            "def plan():\n    from arena_ls.cluster.backend import RayBackend\n"
        ),
        "arena_ls/gates/rules.py": "from arena_ls.insights import engine\n",
        "arena_ls/insights/engine.py": "from ..gates import rules\n",
        "arena_ls/newroom.py": "",
    }
    for name, text in write.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert floor_violations(tmp_path) == [
        "arena_ls/gates/rules.py:1 imports arena_ls.insights.engine (insights, beside it)",
        "arena_ls/insights/engine.py:1 imports arena_ls.gates.rules (gates, beside it)",
        "arena_ls/lifecycle/supervisor.py:2 imports arena_ls.cluster.backend.RayBackend (cluster, above it)",
        "arena_ls/newroom.py is on no floor of FLOORS",
    ]


def test_the_supervisor_chooses_a_back_end_by_asking_never_by_run_on() -> None:
    """The seam (issue 28): ``supervisor.py`` has no ``runOn`` branch; ``Backends.for_job`` asks each."""
    source = (PACKAGE / "lifecycle" / "supervisor.py").read_text(encoding="utf-8")
    assert "run_on" not in source
    assert not any(
        module.startswith("arena_ls.cluster")
        for _, module in imported_modules(PACKAGE / "lifecycle" / "supervisor.py")
    )


def cluster_reads(path: Path) -> list[str]:
    """Every read of a run's cluster part in ``path`` (``view.spec.cluster``, ``state.cluster``...).

    A run's fields of a back end are that back end's to read (``RunBackend.stop_undelivered``,
    ``trainer_started``); the one passage allowed is the plan's part handed on to the spec
    (``cluster=plan.cluster``), which the supervisor carries without looking into it."""
    found = []
    for node in nodes(path):
        if isinstance(node, ast.Attribute) and node.attr == "cluster":
            owner = ast.unparse(node.value)
            if owner.rsplit(".", 1)[-1] != "plan":
                found.append((node.lineno, f"{path.name}:{node.lineno} reads {owner}.cluster"))
    return [text for _, text in sorted(found)]


def test_the_supervisor_asks_the_back_end_never_reads_a_runs_cluster_fields() -> None:
    """The stop and the start ask the run's back end (a cluster's stop, its accepted submission):
    ``supervisor.py`` has no ``spec.cluster`` / ``state.cluster`` test of its own."""
    assert cluster_reads(PACKAGE / "lifecycle" / "supervisor.py") == []


def test_the_cluster_read_checker_finds_a_branch_on_spec_or_state(tmp_path: Path) -> None:
    probe = tmp_path / "supervisor.py"
    probe.write_text(
        "async def stop(view):\n"
        "    if view.spec.cluster is not None:\n"
        "        return view.state.cluster.stop_undelivered\n"
        "    return RunSpec(cluster=plan.cluster)\n"
        "def submitted(state):\n"
        "    return state.cluster is not None and state.cluster.accepted is not None\n"
    )
    assert cluster_reads(probe) == [
        "supervisor.py:2 reads view.spec.cluster",
        "supervisor.py:3 reads view.state.cluster",
        "supervisor.py:6 reads state.cluster",
        "supervisor.py:6 reads state.cluster",
    ]


def private_methods(path: Path, class_name: str) -> set[str]:
    """The ``_private`` methods (not dunders) the class ``class_name`` of ``path`` defines."""
    tree = parsed(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            found |= {
                item.name
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                and item.name.startswith("_")
                and not item.name.startswith("__")
            }
    return found


def private_calls(root: Path, names: set[str], home: Path) -> list[str]:
    """Every ``x.name`` (``x`` not ``self``) for ``name`` in ``names`` outside ``home``: a private
    method reached from another module."""
    found = []
    for path in sorted((root / "arena_ls").rglob("*.py")):
        if path == home:
            continue
        for node in nodes(path):
            on_itself = (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            )
            if isinstance(node, ast.Attribute) and node.attr in names and not on_itself:
                found.append(f"{path.relative_to(root)}:{node.lineno} reaches {node.attr}")
    return found


def test_no_module_reaches_a_private_method_of_the_supervisor() -> None:
    """The probe is a start variant (issue 28): nothing re-implements the start from its private steps."""
    starter = PACKAGE / "lifecycle" / "starter.py"
    names = private_methods(starter, "Starter")
    assert {"_refuse_if_active", "_launch", "_await_started"} <= names, "the checker reads the class"
    assert private_calls(PACKAGE.parent, names, starter) == []
    supervisor = PACKAGE / "lifecycle" / "supervisor.py"
    assert private_calls(PACKAGE.parent, private_methods(supervisor, "Supervisor"), supervisor) == []


def test_the_private_call_checker_finds_one(tmp_path: Path) -> None:
    home = tmp_path / "arena_ls" / "lifecycle" / "supervisor.py"
    home.parent.mkdir(parents=True)
    home.write_text("class Supervisor:\n    async def _launch(self): ...\n    def __init__(self): ...\n")
    other = tmp_path / "arena_ls" / "probe.py"
    other.write_text(
        "async def f(s):\n    await s._launch()\n\nclass A:\n    def g(self):\n        self._launch()\n"
    )
    names = private_methods(home, "Supervisor")
    assert names == {"_launch"}
    assert private_calls(tmp_path, names, home) == ["arena_ls/probe.py:2 reaches _launch"]


def floor_index(name: str) -> int:
    """The floor of the room ``name`` in ``FLOORS``."""
    return next(level for level, rooms in enumerate(FLOORS) for room in rooms if name in room)


def test_the_run_is_split_by_process_run_then_health_then_agent_then_the_server() -> None:
    """Issue 38: the on-disk format is the lowest (every process reads it), health is below the
    agent (the agent reads the hardware; health never reaches an agent), and the server's side
    (``lifecycle``) is above the agent it starts; each is a room of its own."""
    order = ["run", "health", "agent", "lifecycle", "cluster"]
    floors = [floor_index(name) for name in order]
    assert floors == sorted(floors) and len(set(floors)) == len(floors)
    for name in order:
        assert (name,) in FLOORS[floor_index(name)], f"{name} shares its room"


def test_the_floor_checker_catches_health_reaching_an_agent_and_the_format_reaching_the_server(
    tmp_path: Path,
) -> None:
    write = {
        "arena_ls/__init__.py": "",
        "arena_ls/health/preflight.py": "from arena_ls.run.rundir import make_state_folder\n"
        "from arena_ls.agent.statewriter import StateWriter\n",
        "arena_ls/run/rundir.py": "def f():\n    from arena_ls.lifecycle import supervisor\n",
        "arena_ls/agent/launch.py": (
            "from arena_ls.health import agent_hardware\nimport arena_ls.run.outputlog\n"
        ),
    }
    for name, text in write.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert floor_violations(tmp_path) == [
        "arena_ls/health/preflight.py:2 imports arena_ls.agent.statewriter.StateWriter (agent, above it)",
        "arena_ls/run/rundir.py:2 imports arena_ls.lifecycle.supervisor (lifecycle, above it)",
    ]


PUBLISHED = ("run", "agent", "agent.local", "lifecycle")
"""Packages whose ``__init__`` names, in ``__all__``, the modules other packages may import."""


def published_modules(package_dir: Path) -> set[str]:
    """The names in ``__all__`` of ``package_dir/__init__.py``, read without importing it."""
    tree = parsed(package_dir / "__init__.py")
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            return set(value)
    raise AssertionError(f"{package_dir}/__init__.py has no __all__")


def unpublished_imports(root: Path, packages: tuple[str, ...] = PUBLISHED) -> list[str]:
    """Every import from outside a package of ``packages`` of one of its modules that its
    ``__init__`` does not name (an inner module, or one the list forgot)."""
    found: list[str] = []
    for package in packages:
        home = root / "arena_ls" / package.replace(".", "/")
        prefix = f"arena_ls.{package}."
        allowed = published_modules(home)
        for path in sorted((root / "arena_ls").rglob("*.py")):
            if home in path.parents:
                continue
            for line, module in imported_modules(path, root=root):
                if module.startswith(prefix):
                    name = module.removeprefix(prefix).split(".")[0]
                    if name not in allowed:
                        found.append(f"{path.relative_to(root)}:{line} imports {module}")
    return found


def test_other_packages_import_only_what_a_packages_init_names() -> None:
    """Each package of the split names its public modules (its ``__init__``'s ``__all__``, kept in
    step with its docstring); an import from outside of any other module is found here."""
    for package in PUBLISHED:
        home = PACKAGE / package.replace(".", "/")
        on_disk = {p.stem for p in home.glob("*.py") if p.stem != "__init__"}
        on_disk |= {p.parent.name for p in home.glob("*/__init__.py")}
        assert published_modules(home) <= on_disk, f"{package}'s __all__ names a module it lacks"
    assert unpublished_imports(PACKAGE.parent) == []


def test_the_published_import_checker_finds_an_unnamed_module(tmp_path: Path) -> None:
    (tmp_path / "arena_ls" / "run").mkdir(parents=True)
    (tmp_path / "arena_ls" / "run" / "__init__.py").write_text('__all__ = ["rundir"]\n')
    (tmp_path / "arena_ls" / "run" / "secret.py").write_text("import arena_ls.run.rundir\n")
    (tmp_path / "arena_ls" / "lifecycle").mkdir()
    (tmp_path / "arena_ls" / "lifecycle" / "x.py").write_text(
        "from arena_ls.run.rundir import RunDir\nfrom arena_ls.run import secret\n"
    )
    assert unpublished_imports(tmp_path, ("run",)) == [
        "arena_ls/lifecycle/x.py:2 imports arena_ls.run.secret"
    ]


def module_file(module: str, root: Path = PACKAGE.parent) -> Path | None:
    """The file of ``arena_ls.a.b`` (or of its longest prefix that is a module: ``a.b.Name``)."""
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        base = root.joinpath(*parts[:cut])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def import_time_modules(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    """The modules ``path`` imports when it is loaded: not inside a function (run later, if ever)
    nor under ``if TYPE_CHECKING:``; relative imports resolved as ``imported_modules`` does."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.extend(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(parsed(path))
    return found


def loaded_by(entry: str, root: Path = PACKAGE.parent) -> tuple[set[str], set[Path]]:
    """(the outside packages, the files of ``arena_ls``) that loading ``entry`` loads: every module
    it imports at load time, and theirs, with the ``__init__`` of each package on the way."""
    seen: set[Path] = set()
    found: set[str] = set()
    todo = [module_file(entry, root)]
    while todo:
        path = todo.pop()
        if path is None or path in seen:
            continue
        seen.add(path)
        package = path.parent
        while package != root and (package / "__init__.py").is_file():
            todo.append(package / "__init__.py")
            package = package.parent
        for module in import_time_modules(path, root):
            top = module.split(".")[0]
            if top == "arena_ls":
                todo.append(module_file(module, root))
            else:
                found.add(top)
    return found, seen


@pytest.mark.parametrize(
    "entry", ["arena_ls.agent.launch", "arena_ls.agent.local.agent", "arena_ls.cluster.agent"]
)
def test_an_agent_loads_nothing_of_the_lsp_stack(entry: str) -> None:
    """The agents are small detached processes (about 30 MB): loading one loads no pygls and no
    lsprotocol, however deep the import (a function's own import, run later if ever, aside:
    ``diagnostics`` makes a URI with pygls only when asked for one)."""
    loaded, files = loaded_by(entry)
    assert PACKAGE / "run" / "outputlog.py" in files, "the walk reaches the run folder's code"
    assert loaded & {"pygls", "lsprotocol"} == set()


def test_the_lsp_stack_walk_finds_a_deep_import(tmp_path: Path) -> None:
    files = {
        "arena_ls/__init__.py": "",
        "arena_ls/agent/__init__.py": "",
        "arena_ls/agent/launch.py": "import json\nfrom arena_ls.agent import deep\n",
        "arena_ls/agent/deep.py": "from arena_ls.run.x import Y\ndef f():\n    import pygls\n",
        "arena_ls/run/__init__.py": "import attrs\n",
        "arena_ls/run/x.py": "from lsprotocol import types\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert loaded_by("arena_ls.agent.launch", tmp_path)[0] == {"json", "attrs", "lsprotocol"}


def supervisor_reaches(protocol: Path, facade: Path) -> list[str]:
    """``file:line`` of every ``X.supervisor`` in ``protocol``'s modules but the façade."""
    found = []
    for path in sorted(protocol.rglob("*.py")):
        if path == facade:
            continue
        tree = parsed(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "supervisor":
                found.append(f"{path.relative_to(protocol.parent.parent)}:{node.lineno}")
    return found


def test_the_protocol_reaches_the_supervisor_only_through_its_workspace_facade() -> None:
    """Issue 38: features and the server ask the workspace (``services/workspace.py``, shaped by
    ``protocol/workspace.py``), never ``ws.supervisor.<anything>``."""
    protocol = PACKAGE / "protocol"
    assert supervisor_reaches(protocol, protocol / "workspace.py") == []


def test_the_supervisor_reach_checker_finds_one(tmp_path: Path) -> None:
    protocol = tmp_path / "arena_ls" / "protocol"
    protocol.mkdir(parents=True)
    (protocol / "workspace.py").write_text("x = self.supervisor.views\n")
    (protocol / "lens.py").write_text("def f(ws):\n    return ws.supervisor.manifests\n")
    assert supervisor_reaches(protocol, protocol / "workspace.py") == ["arena_ls/protocol/lens.py:2"]
