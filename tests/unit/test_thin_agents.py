"""Both agents stay thin (issue 28 item 2): the trainer of each back end lives in its own modules.

An agent module reads its run folder and spec, holds the lock, builds its
``Trainer`` and the ``AttemptLoop`` and handles the exit; launching, following,
stopping and judging an attempt belong to ``LocalTrainer`` and ``RayTrainer``.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from arena_ls.agent.attempts import Trainer
from arena_ls.agent.local import agent as local_agent
from arena_ls.agent.local import output as local_output
from arena_ls.agent.local import stop as local_stop
from arena_ls.agent.local import trainer as local_trainer
from arena_ls.agent.local.trainer import LocalTrainer
from arena_ls.cluster import agent as cluster_agent
from arena_ls.cluster import ray_logs, ray_stop, ray_trainer
from arena_ls.cluster.ray_trainer import RayTrainer

AGENT_MODULES = [local_agent, cluster_agent]
TRAINER_MODULES = [local_trainer, local_stop, local_output, ray_trainer, ray_stop, ray_logs]
AGENT_MOST_LINES = 250
TRAINER_MODULE_MOST_LINES = 400


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
