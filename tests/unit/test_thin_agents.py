"""Both agents stay thin (issue 28 item 2): the trainer of each back end lives in its own modules.

An agent module reads its run folder and spec, holds the lock, builds its
``Trainer`` and the ``AttemptLoop`` and handles the exit; launching, following,
stopping and judging an attempt belong to ``LocalTrainer`` and ``RayTrainer``.

Each trainer is composed, never inherited (issue 38): it owns its parts (the
stop protocol, the output or log copy with the run's one ``Announcements``
handler), each with its own state and the few things it is handed. The size
rule counts lines per class, so a class is never split by inheritance to pass it.
"""

from __future__ import annotations

import abc
import ast
import inspect
from pathlib import Path
from types import ModuleType
from typing import Protocol

import pytest

from arena_ls.agent import announcements
from arena_ls.agent.attempts import Trainer
from arena_ls.agent.local import agent as local_agent
from arena_ls.agent.local import output as local_output
from arena_ls.agent.local import stop as local_stop
from arena_ls.agent.local import trainer as local_trainer
from arena_ls.agent.local.trainer import LocalTrainer
from arena_ls.cluster import agent as cluster_agent
from arena_ls.cluster import contact, ray_logs, ray_stop, ray_trainer
from arena_ls.cluster.ray_trainer import RayTrainer

AGENT_MODULES = [local_agent, cluster_agent]
TRAINER_MODULES = [local_trainer, local_stop, local_output, ray_trainer, ray_stop, ray_logs]
TRAINER_PARTS = [*TRAINER_MODULES, announcements, contact]
"""The modules of the trainers and of their parts (the shared announcement handler, the cluster's answers)."""
AGENT_MOST_LINES = 250
TRAINER_MODULE_MOST_LINES = 600
"""A module's bound, as for every module of ``arena_ls`` (``scripts/house_counts.py``)."""
TRAINER_CLASS_MOST_LINES = 350
"""A class's bound: the largest part today (``StopProtocol``) is about 340 lines."""


def trainer_members() -> set[str]:
    """The names the attempt loop calls on a trainer (``attempts.Trainer``)."""
    return {name for name in vars(Trainer) if not name.startswith("_")}


def test_the_trainer_protocol_is_what_this_test_thinks() -> None:
    assert {"launch", "tail", "sit_out", "resume_paused", "announced", "launched_from"} <= trainer_members()


@pytest.mark.parametrize("module", AGENT_MODULES, ids=lambda module: module.__name__)
def test_an_agent_module_stays_short(module: object) -> None:
    lines = Path(inspect.getfile(module)).read_text(encoding="utf-8").count("\n")  # type: ignore[arg-type]
    assert lines < AGENT_MOST_LINES, f"{module} has {lines} lines: move its trainer's code out"


@pytest.mark.parametrize("module", AGENT_MODULES, ids=lambda module: module.__name__)
def test_an_agent_module_defines_no_trainer_method(module: object) -> None:
    tree = ast.parse(Path(inspect.getfile(module)).read_text(encoding="utf-8"))  # type: ignore[arg-type]
    defined = {
        node.name
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert not defined & trainer_members(), f"{module} implements Trainer itself"


@pytest.mark.parametrize("module", TRAINER_MODULES, ids=lambda module: module.__name__)
def test_a_trainer_module_stays_under_its_size(module: object) -> None:
    lines = Path(inspect.getfile(module)).read_text(encoding="utf-8").count("\n")  # type: ignore[arg-type]
    assert lines <= TRAINER_MODULE_MOST_LINES, f"{module} has {lines} lines: split it"


def class_sizes(source: str) -> dict[str, int]:
    """Lines of each class of ``source`` (nested ones too), from its ``class`` line to its last."""
    return {
        node.name: (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef)
    }


@pytest.mark.parametrize("module", TRAINER_PARTS, ids=lambda module: module.__name__)
def test_a_trainer_class_stays_under_its_size(module: ModuleType) -> None:
    sizes = class_sizes(Path(inspect.getfile(module)).read_text(encoding="utf-8"))
    too_long = {name: lines for name, lines in sizes.items() if lines > TRAINER_CLASS_MOST_LINES}
    assert not too_long, f"{module.__name__}: {too_long} lines: give a part its own class (composition)"


def test_the_class_size_counts_each_class_not_the_file() -> None:
    source = "class A:\n    x = 1\n\n\nclass B:\n    def f(self):\n        return 2\n"
    assert class_sizes(source) == {"A": 2, "B": 3}


def inherited_from_us(cls: type) -> list[str]:
    """The classes of ``arena_ls`` that ``cls`` inherits from, but ``Protocol``s and abstract
    classes (interfaces, whose bodies hold no state of their own)."""
    found = []
    for base in cls.__mro__[1:]:
        if not base.__module__.startswith("arena_ls"):
            continue
        interface = getattr(base, "_is_protocol", False) or (
            isinstance(base, abc.ABCMeta) and bool(getattr(base, "__abstractmethods__", ()))
        )
        if not interface:
            found.append(f"{base.__module__}.{base.__name__}")
    return found


def classes_of(module: ModuleType) -> list[type]:
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__
    ]


@pytest.mark.parametrize("module", TRAINER_PARTS, ids=lambda module: module.__name__)
def test_trainer_classes_are_composed_never_a_chain_of_our_bases(module: ModuleType) -> None:
    """``LocalTrainer`` was ``StopProtocol`` <- ``TrainerOutput`` <- ``TrainerVoice``, sharing one
    mutable ``self`` over four files (and ``RayTrainer`` mirrored it): each part is an object now."""
    classes = classes_of(module)
    assert classes, f"{module.__name__} defines no class: the list is out of date"
    chains = {cls.__name__: inherited_from_us(cls) for cls in classes if inherited_from_us(cls)}
    assert chains == {}


def test_the_inheritance_checker_finds_a_base_of_ours_and_allows_an_interface() -> None:
    class Voice:
        pass

    Voice.__module__ = "arena_ls.agent.voice"

    class Host(Protocol):
        def pause(self, seconds: float) -> None: ...

    Host.__module__ = "arena_ls.agent.watchdog"

    class Shape(abc.ABC):
        @abc.abstractmethod
        def area(self) -> float: ...

    Shape.__module__ = "arena_ls.agent.shape"

    class Output(Voice):
        pass

    Output.__module__ = "arena_ls.agent.output"

    class Trainer(Output, Host, Shape):
        def pause(self, seconds: float) -> None: ...

        def area(self) -> float:
            return 0.0

    assert inherited_from_us(Trainer) == ["arena_ls.agent.output.Output", "arena_ls.agent.voice.Voice"]
    assert inherited_from_us(Host) == [] and inherited_from_us(Shape) == []


@pytest.mark.parametrize("trainer", [LocalTrainer, RayTrainer], ids=lambda cls: cls.__name__)
def test_each_back_end_has_a_whole_trainer(trainer: type) -> None:
    missing = {name for name in trainer_members() if not hasattr(trainer, name)}
    assert not missing, f"{trainer.__name__} lacks {sorted(missing)}"


def test_each_agent_hands_the_loop_its_trainer_not_itself() -> None:
    for module, trainer in ((local_agent, "LocalTrainer"), (cluster_agent, "RayTrainer")):
        source = Path(inspect.getfile(module)).read_text(encoding="utf-8")
        assert f"{trainer}(" in source and "AttemptLoop(" in source
        assert (
            "AttemptLoop(self.record, self)" not in source
            and "AttemptLoop(self.run_record, self)" not in source
        )


def forwarders(source: str) -> list[str]:
    """The members of ``source``'s classes that only pass something on to another object: a property
    (with or without a setter), or a method whose one statement hands its own arguments, unchanged,
    to a method of one of its attributes (``return self.trainer.abandon()``)."""
    found = []
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            decorators = [ast.unparse(decorator) for decorator in node.decorator_list]
            target = passed_on_to(node)
            if any(d == "property" or d.endswith((".setter", ".getter")) for d in decorators):
                found.append(f"{cls.name}.{node.name} (a property)")
            elif target is not None:
                found.append(f"{cls.name}.{node.name} (passes on to {target})")
    return found


def passed_on_to(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """``self.<attribute>.<method>`` when the function's one statement (its docstring aside) calls
    it with the function's own arguments, unchanged; else None."""
    body = [stmt for stmt in node.body if not _is_docstring(stmt)]
    call = body[0].value if len(body) == 1 and isinstance(body[0], (ast.Return, ast.Expr)) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute) or call.keywords:
        return None
    owner = call.func.value
    on_self = isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name)
    if not on_self or owner.value.id != "self":  # type: ignore[attr-defined]
        return None
    params = [arg.arg for arg in node.args.args[1:]]
    passed = [arg.id if isinstance(arg, ast.Name) else None for arg in call.args]
    return ast.unparse(call.func) if passed == params else None


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


@pytest.mark.parametrize("module", AGENT_MODULES, ids=lambda module: module.__name__)
def test_an_agent_has_no_forwarding_members(module: object) -> None:
    """Callers and tests reach the trainer and the run's record themselves (``agent.trainer``,
    ``agent.record``): no agent keeps the trainer's names as its own."""
    assert forwarders(Path(inspect.getfile(module)).read_text(encoding="utf-8")) == []  # type: ignore[arg-type]


def test_the_forwarder_checker_finds_properties_setters_and_passing_methods() -> None:
    source = (
        "class Agent:\n"
        "    @property\n"
        "    def process(self):\n"
        "        return self.trainer.process\n"
        "    @process.setter\n"
        "    def process(self, p):\n"
        "        self.trainer.process = p\n"
        "    def abandon(self):\n"
        '        """Best effort."""\n'
        "        return self.trainer.abandon()\n"
        "    def _move(self, target):\n"
        "        self.record.move(target)\n"
        "    def tell(self, event):\n"
        "        self.output.append_line(ARENA, event.encode_lines())\n"
        "    def say(self, text):\n"
        "        self.tell(note(text))\n"
    )
    assert forwarders(source) == [
        "Agent.process (a property)",
        "Agent.process (a property)",
        "Agent.abandon (passes on to self.trainer.abandon)",
        "Agent._move (passes on to self.record.move)",
    ]
