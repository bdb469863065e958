"""Which checkpoint saves the loop makes periodically, and whether each is announced (AR014).

A trainer that announces only its stop save (``if stop: save(); print("@arena
...")``) passes a file-wide look for an announcement, yet every save the loop
makes on its way is silent: a crash is then relaunched from the last announced
step, or from step 0 (issue 23). So AR014 looks at each save path from the
loop:

- **once, not periodic**: a save under a branch that leaves the loop
  (``break``, ``return``, ``raise``, ``sys.exit``), a branch whose test looks
  for a stop (``stop``, ``exists``, ``signal``, ``interrupt``, ``preempt``) or
  for the end (``last``, ``final``, ``done``), or an exception handler; saves
  after the loop are never on a loop path at all;
- **a best-model copy**: a save under a test against a best value
  (``if val_loss < best:``) or to a path naming ``best`` is an export, not the
  point a relaunch resumes from: it need not be announced (announcing it would
  make the supervisor resume from a step the resume checkpoint may not hold);
- **announced**: a line announcing a checkpoint is printed in the block of
  the save or of a call on the way to it (the helper that saves, or the block
  of the loop that calls it), or by a same-file function called from one of
  those blocks. A stop branch's announcement, a sibling of the periodic
  branch, is not in those blocks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Sequence

from arena_ls.trainer_facts.announce import announced_by
from arena_ls.trainer_facts.facts import CallSite, ModuleFacts
from arena_ls.trainer_facts.patterns import lazy
from arena_ls.trainer_facts.reach import CallGraph, Path

_ONCE_TEST = lazy(r"stop|exists|signal|interrupt|preempt|\blast|final|done|finish", re.IGNORECASE)
_EXITS = frozenset({"exit", "_exit", "quit"})
_BEST = lazy(r"best", re.IGNORECASE)


def is_periodic(path: Path) -> bool:
    """Whether the loop reaches this save on its way, not only once (stop, end, error), and it
    saves the resume checkpoint (not a best-model copy)."""
    if _BEST.search(ast.unparse(path.target.node)):
        return False
    for node, field in path.links():
        if isinstance(node, ast.If) and _BEST.search(ast.unparse(node.test)):
            return False
        if isinstance(node, ast.If) and field in ("body", "orelse") and _once(node, getattr(node, field)):
            return False
        if isinstance(node, ast.ExceptHandler) or (isinstance(node, ast.Try) and field == "handlers"):
            return False
    return True


def is_announced(path: Path, facts: ModuleFacts, graph: CallGraph, patterns: Sequence[str]) -> bool:
    """Whether a checkpoint line is printed beside the save, or beside a call on the way to it."""
    sites: list[CallSite] = []
    for site in path.sites:
        sites.extend(_block_calls(_block_of(site), facts))
    helpers = graph.reached_scopes(sites, hops=2)
    calls = sites + [call for scope in helpers for call in scope.calls]
    return announced_by(calls, patterns)


def _once(branch: ast.If, block: Sequence[ast.stmt]) -> bool:
    """A branch that runs once: its test looks for a stop or the end, or it leaves the loop."""
    return bool(_ONCE_TEST.search(ast.unparse(branch.test))) or _leaves(block)


def _leaves(block: Sequence[ast.stmt]) -> bool:
    """The block ends the loop (or the run): a ``break``, ``return``, ``raise`` or exit at its top level."""
    for stmt in block:
        if isinstance(stmt, (ast.Break, ast.Return, ast.Raise)):
            return True
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name in _EXITS:
                return True
    return False


def _block_of(site: CallSite) -> list[ast.stmt]:
    """The statement list that holds the call's statement (its scope's body at the top)."""
    if site.chain:
        node, field = site.chain[-1]
        block = getattr(node, field, None)
    else:
        block = getattr(site.scope.node, "body", None)
    return [stmt for stmt in block if isinstance(stmt, ast.stmt)] if isinstance(block, list) else []


def _block_calls(block: Sequence[ast.stmt], facts: ModuleFacts) -> list[CallSite]:
    """Calls in the block's statements, not under a nested branch that runs only once."""
    found: list[CallSite] = []
    for stmt in block:
        for node in _walk_periodic(stmt):
            site = facts.site_for(node) if isinstance(node, ast.Call) else None
            if site is not None:
                found.append(site)
    return found


def _walk_periodic(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` that skips nested functions and branches that run once (a stop branch)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
        return
    if isinstance(node, ast.If) and _once(node, node.body):
        return
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk_periodic(child)
