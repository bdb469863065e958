"""Resolving N: literals, constants, config attributes, argparse defaults, and the
zero/None defaults that mean "never"."""

from __future__ import annotations

import ast

import pytest

from arena_ls.trainer_facts.facts import collect_facts
from arena_ls.trainer_facts.values import Resolver

HEADER = """\
import argparse
from dataclasses import dataclass, field

SAVE_EVERY = 250
parser = argparse.ArgumentParser()
parser.add_argument("--ckpt-every", type=int, default=1000)
parser.add_argument("--val_every", type=int, default=0)
parser.add_argument("--checkpointing-steps", type=str, default=None)
parser.add_argument("--eval-interval", dest="eval_iv", type=int, default="40")
parser.add_argument("--log-every", type=int)
parser.add_argument("--fp16", action="store_true")
parser.add_argument("--overridden", type=int, default=5)
parser.set_defaults(overridden=7)


@dataclass
class Config:
    empty_cache_every: int = 50
    keep: int = field(default=3)


cfg = {"eval_interval": 300}
BASE = 10
"""


def resolve(expression: str) -> object:
    source = HEADER + f"value = {expression}\n"
    tree = ast.parse(source)
    facts = collect_facts(tree)
    assignment = facts.module.assigns["value"][-1]
    value = Resolver(facts).resolve(assignment.value, facts.module, assignment.stmt.lineno)
    return value.value if value.known else "unknown"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("500", 500),
        ("SAVE_EVERY", 250),
        ("args.ckpt_every", 1000),
        ("opt.ckpt_every", 1000),
        ("args.val_every", 0),
        ("args.checkpointing_steps", None),
        ("int(args.eval_iv)", 40),
        ("args.log_every", None),
        ("args.fp16", False),
        ("args.overridden", 7),
        ("cfg.empty_cache_every", 50),
        ("self.config.keep", 3),
        ('cfg["eval_interval"]', 300),
        ('cfg.get("missing", 12)', 12),
        ("BASE * 5 + 1", 51),
        ("min(8, SAVE_EVERY)", 8),
        ("args.unknown_option", "unknown"),
        ("len(data)", "unknown"),
    ],
)
def test_resolve(expression: str, expected: object) -> None:
    assert resolve(expression) == expected


def test_a_function_default_and_a_later_local_assignment() -> None:
    source = """\
def train(save_every=400):
    every = save_every
    every = every * 2
    return every
"""
    facts = collect_facts(ast.parse(source))
    scope = facts.module.functions["train"]
    ret = scope.returns[-1]
    assert ret.value is not None
    assert Resolver(facts).resolve(ret.value, scope).value == 800


def test_cycles_do_not_recurse_forever() -> None:
    facts = collect_facts(ast.parse("a = b\nb = a\nx = a\n"))
    assignment = facts.module.assigns["x"][-1]
    assert not Resolver(facts).resolve(assignment.value, facts.module).known
