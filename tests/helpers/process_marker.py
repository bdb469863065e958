"""The ``process`` marker: set automatically on every test that starts a process, and enforced.

``pytest -m "not process"`` is the fast run a developer makes on every save; it must not
start servers, agents or trainers, and it must not silently skip a test that would.

**A training framework loaded in-process** is marked too: a test that uses a fixture of
``xdist_groups.IN_PROCESS_FRAMEWORKS`` (``torch``, ``train_module``, ``transformers``,
``lightning_pytorch``) imports PyTorch, transformers or Lightning into the test's own process,
2-6 s of CPU before it can start, as much as a test that starts a trainer. The fast run leaves
those 30 tests (the trainer kit's and the reference trainer's in-process tests) to the full
suite, as it leaves the ones that start trainers (docs/performance.md, "The fast lane without
the frameworks' imports").

**Marking** (at collection, nothing to write in a test): a test is marked ``process`` when
its code can reach a way to start a process. What is read: the test function (and its
``parametrize`` arguments), every fixture it uses (``tests/conftest.py``'s ``ray_head``
included), and what those call, followed by name through the modules of this repository
(``tests/helpers/lsp.py``'s ``start_server`` reaches pytest-lsp's ``start_io``; a helper of
the test's own module that runs ``subprocess.run`` is found the same way). Calls are
followed where a name says where they go: a module's function, a class's construction
(``__init__``, ``__post_init__``, ``__enter__``...) when the class is referenced,
``self.method``, and a method of a local variable built from a known class in the same
function. Not followed: a method of an object of unknown type (a fixture's object,
``self._backend.start()``), a module loaded by path, and parameter defaults (kept for later,
and replaced by the tests that hand in a fake). Against a record of every start the whole
suite made, nothing that started a process was left unmarked, and 10 tests of 1,258 were
marked without starting one (7 of them the Windows-only tests, skipped here).

**Enforcement**: while a test that is not marked runs (its fixtures' set-up and tear-down
included), every way this interpreter has to start a process is watched: the fork-exec of
``subprocess`` (and so of asyncio's subprocesses and of multiprocessing's spawn and
forkserver), ``os.fork`` (multiprocessing's fork), ``os.forkpty``, ``os.posix_spawn[p]``
and ``os.system``. A test that starts one fails, saying where it started it and what to do:
mark it ``@pytest.mark.process`` (or start the process through a helper that is followed).
So a wrong automatic mark cannot hide: the fast run never runs a process in silence.

``ARENA_PROCESS_AUDIT=FILE`` appends one JSON line per test (marked or not, why, and what
it started), to check the marking against what the tests did; ``ARENA_PROCESS_TIMING=1``
prints how long the reading took. The verdicts are kept between runs while the source they
read is byte for byte the same (``process_marks_cache.py``; ``ARENA_PROCESS_CACHE=0`` reads
everything afresh).
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.helpers.process_marks_cache import MarkCache, is_missing
from tests.helpers.process_marks_cache import enabled as marks_cache_enabled
from tests.helpers.xdist_groups import IN_PROCESS_FRAMEWORKS

if sys.platform != "win32":
    import _posixsubprocess

MARKER = "process"
REPO = Path(__file__).resolve().parents[2]
FOLLOWED = ("tests", "arena_ls", "benchmarks")
"""Top-level packages whose source is read to follow calls."""

SPAWNING_CALLS = frozenset(
    {
        "subprocess.Popen",
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "subprocess.getoutput",
        "subprocess.getstatusoutput",
        "asyncio.create_subprocess_exec",
        "asyncio.create_subprocess_shell",
        "asyncio.subprocess.create_subprocess_exec",
        "asyncio.subprocess.create_subprocess_shell",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.posix_spawnp",
        "os.system",
        "os.popen",
        *(f"os.spawn{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
        "pty.fork",
        "pty.spawn",
        "psutil.Popen",
        "concurrent.futures.ProcessPoolExecutor",
    }
)
SPAWNING_MODULES = ("multiprocessing",)
SPAWNING_METHODS = frozenset({"start_io", "subprocess_exec", "subprocess_shell"})
"""Methods that start a process whatever their object: pytest-lsp's ``LanguageClient.start_io``
and the event loop's ``subprocess_exec`` / ``subprocess_shell``."""
BUILDERS = ("__init__", "__post_init__", "__attrs_post_init__", "__new__", "__enter__", "__aenter__")
"""What a referenced class runs when it is built or entered."""


# -- what code can reach ------------------------------------------------------------------------


@attrs.define
class _Module:
    name: str
    tree: ast.Module
    aliases: dict[str, str]
    """Local name -> the dotted name it was imported as (imports anywhere in the module)."""
    top: dict[str, ast.AST]
    """Top-level functions, classes and assigned values, by name."""


@attrs.define
class _Target:
    """A resolved name: a function, a class (and what it runs), a value, or a spawning call."""

    key: str
    node: ast.AST | None
    module: _Module | None
    owner: str | None = None
    """For a method: the key of its class (so that ``self.x`` resolves)."""


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _aliases(tree: ast.Module, package: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                if name.asname:
                    found[name.asname] = name.name
                else:
                    first = name.name.split(".")[0]
                    found[first] = first
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            for name in node.names:
                found[name.asname or name.name] = f"{base}.{name.name}"
    return found


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    top: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            top[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    top[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            top[node.target.id] = node.value
    return top


def _parse(name: str, path: Path, package: str) -> _Module | None:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    return _Module(name, tree, _aliases(tree, package), _top_level(tree))


def _unrun_ids(node: ast.AST) -> set[int]:
    """The nodes that a call does not run: annotations (never evaluated, with ``from __future__
    import annotations``) and parameter defaults (a value kept for later, which a test replaces:
    ``SpareAgent(spawn=_spawn)`` is given a fake ``spawn`` by its unit tests)."""
    skipped: set[int] = set()
    for child in ast.walk(node):
        unrun: list[ast.AST | None] = []
        if isinstance(child, ast.arg):
            unrun.append(child.annotation)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            unrun.append(child.returns)
            unrun.extend([*child.args.defaults, *child.args.kw_defaults])
        elif isinstance(child, ast.AnnAssign):
            unrun.append(child.annotation)
        for part in unrun:
            if part is not None:
                skipped.update(id(n) for n in ast.walk(part))
    return skipped


class Reach:
    """Which code can start a process, by name, over the source of this repository."""

    def __init__(self, repo: Path = REPO) -> None:
        self.repo = repo
        self._modules: dict[str, _Module | None] = {}
        self._edges: dict[str, tuple[str | None, list[_Target]]] = {}
        self._spawns: dict[str, list[str]] = {}
        """Key -> a path of keys to a spawning call (the last one)."""
        self._clean: set[str] = set()
        self._resolved: dict[str, _Target | None] = {}
        self._functions: dict[Callable[..., Any], _Target | None] = {}

    # modules and names

    def module(self, name: str) -> _Module | None:
        if name.partition(".")[0] not in FOLLOWED and name not in self._modules:
            return None
        if name not in self._modules:
            self._modules[name] = self._load(name)
        return self._modules[name]

    def _load(self, name: str) -> _Module | None:
        if name.split(".")[0] not in FOLLOWED:
            return None
        base = self.repo.joinpath(*name.split("."))
        for path, package in (
            (base.with_suffix(".py"), name.rpartition(".")[0]),
            (base / "__init__.py", name),
        ):
            if path.is_file():
                return _parse(name, path, package)
        return None

    def adopt(self, name: str, path: Path) -> None:
        """Read a test module that lives outside this repository (a pytester test's) as ``name``."""
        if self._modules.get(name) is None:
            self._modules[name] = _parse(name, path, name.rpartition(".")[0])

    def module_of(self, path: Path) -> str | None:
        try:
            relative = path.resolve().relative_to(self.repo).with_suffix("")
        except ValueError:
            return None
        parts = list(relative.parts)
        if parts and parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts) or None

    def resolve(self, dotted: str, depth: int = 0) -> _Target | None:
        """The target of a fully qualified name, or None when it is not code we read."""
        if dotted not in self._resolved:
            self._resolved[dotted] = self._resolve(dotted, depth)
        return self._resolved[dotted]

    def _resolve(self, dotted: str, depth: int) -> _Target | None:
        if dotted in SPAWNING_CALLS or dotted.split(".")[0] in SPAWNING_MODULES:
            return _Target(dotted, None, None)
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            module = self.module(".".join(parts[:cut]))
            if module is not None:
                return self._inside(module, parts[cut:], depth)
        return None

    def _inside(self, module: _Module, rest: list[str], depth: int) -> _Target | None:
        if not rest:
            return None
        first, more = rest[0], rest[1:]
        node = module.top.get(first)
        if node is None:
            alias = module.aliases.get(first)
            if alias is None or depth > 8:
                return None
            return self.resolve(".".join([alias, *more]), depth + 1)
        key = f"{module.name}.{first}"
        if isinstance(node, ast.ClassDef):
            return self._in_class(module, node, key, more, depth)
        if more:
            return None
        return _Target(key, node, module)

    def _in_class(
        self, module: _Module, cls: ast.ClassDef, key: str, rest: list[str], depth: int
    ) -> _Target | None:
        if not rest:
            return _Target(key, cls, module)
        for item in cls.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == rest[0]:
                return _Target(f"{key}.{item.name}", item, module, owner=key) if len(rest) == 1 else None
            if isinstance(item, ast.ClassDef) and item.name == rest[0]:
                return self._in_class(module, item, f"{key}.{item.name}", rest[1:], depth)
        for base in cls.bases:  # an inherited method, from a base class we read
            name = _dotted(base)
            qualified = self._qualify(module, name) if name else None
            if qualified and depth < 8:
                found = self.resolve(".".join([qualified, *rest]), depth + 1)
                if found is not None:
                    return found
        return None

    def _qualify(self, module: _Module, dotted: str) -> str:
        first, _, rest = dotted.partition(".")
        if first in module.top:
            base = f"{module.name}.{first}"
        elif first in module.aliases:
            base = module.aliases[first]
        else:
            return dotted
        return f"{base}.{rest}" if rest else base

    # edges

    def edges(self, target: _Target) -> tuple[str | None, list[_Target]]:
        """(the spawning call it makes itself, if any; the targets it refers to)."""
        if target.key not in self._edges:
            self._edges[target.key] = self._compute_edges(target)
        return self._edges[target.key]

    def _compute_edges(self, target: _Target) -> tuple[str | None, list[_Target]]:
        node, module = target.node, target.module
        if node is None:  # a spawning call itself
            return target.key, []
        if module is None:
            return None, []
        if isinstance(node, ast.ClassDef):
            builders = [
                _Target(f"{target.key}.{item.name}", item, module, owner=target.key)
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name in BUILDERS
            ]
            return None, builders
        return self._references(node, module, target.owner)

    def _references(
        self, node: ast.AST, module: _Module, owner: str | None
    ) -> tuple[str | None, list[_Target]]:
        skipped = _unrun_ids(node)
        locals_ = self._local_classes(node, module)
        found: list[_Target] = []
        for child in ast.walk(node):
            if id(child) in skipped:
                continue
            if isinstance(child, ast.Attribute) and child.attr in SPAWNING_METHODS:
                return f".{child.attr}()", []
            if not isinstance(child, ast.Name | ast.Attribute) or isinstance(child.ctx, ast.Store):
                continue
            dotted = _dotted(child)
            if dotted is None:
                continue
            first, _, rest = dotted.partition(".")
            if first == "self" and owner and rest:
                qualified = f"{owner}.{rest}"
            elif first in locals_ and rest:
                qualified = f"{locals_[first]}.{rest}"
            else:
                qualified = self._qualify(module, dotted)
            resolved = self.resolve(qualified)
            if resolved is not None and resolved.node is None:
                return resolved.key, []
            if resolved is not None:
                found.append(resolved)
        return None, found

    def _local_classes(self, node: ast.AST, module: _Module) -> dict[str, str]:
        """Local names bound to an instance of a class we read (``x = Cls(...)``, ``with Cls() as x``)."""
        bound: dict[str, str] = {}

        def bind(name: ast.AST | None, value: ast.AST | None) -> None:
            if isinstance(value, ast.Await):
                value = value.value
            if not isinstance(name, ast.Name) or not isinstance(value, ast.Call):
                return
            dotted = _dotted(value.func)
            if dotted is None:
                return
            target = self.resolve(self._qualify(module, dotted))
            if target is not None and isinstance(target.node, ast.ClassDef):
                bound[name.id] = target.key

        for child in ast.walk(node):
            if isinstance(child, ast.Assign) and len(child.targets) == 1:
                bind(child.targets[0], child.value)
            elif isinstance(child, ast.AnnAssign):
                bind(child.target, child.value)
            elif isinstance(child, ast.With | ast.AsyncWith):
                for item in child.items:
                    bind(item.optional_vars, item.context_expr)
        return bound

    # reachability

    def spawn_path(self, start: _Target) -> list[str] | None:
        """A path of names from ``start`` to a call that starts a process, or None."""
        if start.key in self._spawns:
            return self._spawns[start.key]
        if start.key in self._clean:
            return None
        seen: set[str] = set()
        path = self._search(start, seen, [])
        if path is None:
            self._clean.update(seen)  # a whole search found nothing: none of it reaches a spawn
        return path

    def _search(self, target: _Target, seen: set[str], trail: list[str]) -> list[str] | None:
        if target.key in self._spawns:
            return [*trail, *self._spawns[target.key]]
        if target.key in seen or target.key in self._clean:
            return None
        seen.add(target.key)
        spawn, targets = self.edges(target)
        here = [*trail, target.key]
        if spawn is not None:
            path = [*here, spawn] if spawn != target.key else here
            self._spawns[target.key] = path[len(trail) :]
            return path
        for child in targets:
            path = self._search(child, seen, here)
            if path is not None:
                self._spawns[target.key] = path[len(trail) :]
                return path
        return None

    def of_function(self, function: Callable[..., Any]) -> _Target | None:
        """The target of a test or fixture function object (by its file and qualified name)."""
        if function not in self._functions:
            self._functions[function] = self._of_function(function)
        return self._functions[function]

    def _of_function(self, function: Callable[..., Any]) -> _Target | None:
        function = inspect.unwrap(function)
        try:
            source = inspect.getsourcefile(function)
        except TypeError:
            return None
        if not source:
            return None
        name = self.module_of(Path(source))
        if name is None:
            name = function.__module__
            self.adopt(name, Path(source))
        qualname = getattr(function, "__qualname__", "")
        if "<locals>" in qualname:
            return None
        return self.resolve(f"{name}.{qualname}")


def _short(path: list[str]) -> str:
    return " -> ".join(part.rsplit(".", 2)[-1] if part.count(".") > 1 else part for part in path)


def why_process(reach: Reach, item: pytest.Item) -> str | None:
    """Why ``item`` starts a process (a path of names), or None when nothing of it can."""
    function = getattr(item, "obj", None)
    if function is not None:
        target = reach.of_function(function)
        path = reach.spawn_path(target) if target is not None else None
        if path is not None:
            return _short(path)
    info = getattr(item, "_fixtureinfo", None)
    for name, definitions in info.name2fixturedefs.items() if info is not None else []:
        for definition in definitions:
            target = reach.of_function(definition.func)
            path = reach.spawn_path(target) if target is not None else None
            if path is not None:
                return f"fixture {name}: {_short(path)}"
    return None


# -- the watch ----------------------------------------------------------------------------------


@attrs.define
class _Start:
    how: str
    where: str


class SpawnWatch:
    """Every way this interpreter starts a process, wrapped once; starts are noted while watching."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watching = False
        self._test_file = ""
        self.starts: list[_Start] = []
        self._originals: list[tuple[object, str, object]] = []

    def install(self) -> None:
        if sys.platform == "win32":  # Windows starts processes through _winapi.CreateProcess
            import _winapi

            self._wrap(_winapi, "CreateProcess", "subprocess (CreateProcess)")
            return
        self._wrap(_posixsubprocess, "fork_exec", "a fork-exec (multiprocessing spawn)")
        self._wrap(subprocess, "_fork_exec", "subprocess / asyncio subprocess")
        for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
            self._wrap(os, name, f"os.{name}")

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)
        self._originals.clear()

    def _wrap(self, owner: object, name: str, how: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        watch = self

        def started(*args: Any, **kwargs: Any) -> Any:
            watch._note(how)
            return original(*args, **kwargs)

        self._originals.append((owner, name, original))
        setattr(owner, name, started)

    def _note(self, how: str) -> None:
        with self._lock:
            if not self._watching:
                return
            self.starts.append(_Start(how, _where(self._test_file)))

    @property
    def watching(self) -> bool:
        return self._watching

    def begin(self, test_file: str) -> None:
        with self._lock:
            self._watching = True
            self._test_file = test_file

    def end(self) -> list[_Start]:
        with self._lock:
            self._watching = False
            starts, self.starts = self.starts, []
        return starts


def _where(test_file: str) -> str:
    """The innermost frames of this repository that led to the start (tests first)."""
    roots = tuple(f"{REPO / package}{os.sep}" for package in FOLLOWED)
    frames = [
        frame
        for frame in traceback.extract_stack()[:-2]
        if (frame.filename.startswith(roots) or frame.filename == test_file)
        and not frame.filename.endswith("process_marker.py")
    ]
    ours = [f for f in frames if "/tests/" in f.filename] or frames
    return " <- ".join(f"{_shown(f.filename)}:{f.lineno} ({f.name})" for f in ours[::-1][:3])


def _shown(filename: str) -> str:
    path = Path(filename)
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name


# -- the plugin ---------------------------------------------------------------------------------


def framework_loaded(item: pytest.Item) -> str | None:
    """Why ``item`` is as slow as a process test though it starts none: the fixtures of
    ``IN_PROCESS_FRAMEWORKS`` it uses (each imports a training framework into this process)."""
    used = sorted(set(getattr(item, "fixturenames", ())) & IN_PROCESS_FRAMEWORKS.keys())
    if not used:
        return None
    return f"loads a training framework into the test's own process (fixture {', '.join(used)})"


def _failure(item: pytest.Item, starts: list[_Start]) -> str:
    shown = "\n".join(
        f"  - {start.how}, from {start.where or 'outside this repository'}" for start in starts[:3]
    )
    more = f"\n  ... and {len(starts) - 3} more" if len(starts) > 3 else ""
    return (
        f"{item.nodeid} started a process but is not marked `process`:\n{shown}{more}\n"
        "Mark it `@pytest.mark.process` (or start the process through a helper that is followed: "
        "tests/helpers/lsp.py's start_server, a fixture or a function that calls subprocess itself), "
        'so that `pytest -m "not process"` (the fast run) stays free of processes. '
        "See CONTRIBUTING.md, 'The process marker'."
    )


class ProcessMarker:
    """Marks the tests that start processes at collection, and fails an unmarked one that does."""

    def __init__(self, audit: str | None) -> None:
        self.reach = Reach()
        self.watch = SpawnWatch()
        self.audit = audit
        self._seen: dict[str, list[str]] = {}

    def pytest_configure(self, config: pytest.Config) -> None:
        self.watch.install()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.watch.uninstall()

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Before ``-m`` deselects: the marker must already be there."""
        started = time.perf_counter()
        kept = MarkCache(self.reach.repo) if marks_cache_enabled() else None
        read = 0
        for item in items:
            if item.get_closest_marker(MARKER) is not None:
                continue
            heavy = framework_loaded(item)
            if heavy is not None:
                item.add_marker(pytest.mark.process(auto=heavy))
                continue
            why = kept.get(item.path, item.nodeid) if kept is not None else None
            if kept is None or is_missing(why):
                why = why_process(self.reach, item)
                read += 1
                if kept is not None:
                    kept.put(item.path, item.nodeid, why)
            if why is not None:
                item.add_marker(pytest.mark.process(auto=why))
        if kept is not None:
            kept.save()
        # The marks are set: let the syntax trees go (about 570,000 objects for the whole suite,
        # which every full garbage collection of the run, and the interpreter's exit, walked).
        self.reach = Reach(self.reach.repo)
        if os.environ.get("ARENA_PROCESS_TIMING"):
            print(
                f"process marker: {len(items)} tests marked ({read} read from the source) "
                f"in {time.perf_counter() - started:.2f} s",
                file=sys.stderr,
            )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._guarded(item, "set-up"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        return (yield from self._guarded(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        return (yield from self._guarded(item, "tear-down"))

    def _guarded(self, item: pytest.Item, phase: str) -> Iterator[None]:
        marked = item.get_closest_marker(MARKER) is not None
        self.watch.begin(str(item.path))
        try:
            result = yield
        except BaseException as error:
            starts = self.watch.end()
            self._note(item, phase, starts)
            if starts and not marked:
                raise pytest.fail.Exception(_failure(item, starts), pytrace=False) from error
            raise
        starts = self.watch.end()
        self._note(item, phase, starts)
        if starts and not marked:
            raise pytest.fail.Exception(_failure(item, starts), pytrace=False)
        return result

    def _note(self, item: pytest.Item, phase: str, starts: list[_Start]) -> None:
        if self.audit is None:
            return
        self._seen.setdefault(item.nodeid, []).extend(f"{phase}: {s.how}" for s in starts)
        if phase != "tear-down":
            return
        marker = item.get_closest_marker(MARKER)
        record = {
            "test": item.nodeid,
            "marked": marker is not None,
            "why": (marker.kwargs.get("auto", "explicit") if marker is not None else None),
            "started": sorted(set(self._seen.pop(item.nodeid, []))),
        }
        with open(self.audit, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")


def register(config: pytest.Config) -> None:
    """Called from ``tests/conftest.py``'s ``pytest_configure`` (the marker is declared in pyproject)."""
    plugin = ProcessMarker(os.environ.get("ARENA_PROCESS_AUDIT") or None)
    config.pluginmanager.register(plugin, "arena-process-marker")  # its pytest_configure runs now
