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

from arena_ls.cluster import agent as cluster_agent
from arena_ls.cluster import ray_logs, ray_stop, ray_trainer
from arena_ls.cluster.ray_trainer import RayTrainer
from arena_ls.lifecycle import agent as local_agent
from arena_ls.lifecycle import local_output, local_stop, local_trainer
from arena_ls.lifecycle.attempts import Trainer
from arena_ls.lifecycle.local_trainer import LocalTrainer

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
