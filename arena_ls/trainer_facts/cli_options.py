"""What a trainer's command line can set: its argparse options and nanoGPT's configurator.

The cadence rules judge an option's value; a manifest job's arguments may set
it (``values.Resolver`` reads them), so the options are collected once per
module here.
"""

from __future__ import annotations

import ast
import dataclasses

from arena_ls.trainer_facts.facts import ModuleFacts
from arena_ls.trainer_facts.names import keyword, string_value


@dataclasses.dataclass(frozen=True, slots=True)
class ArgOption:
    """One ``add_argument`` call with option strings (positionals are left out)."""

    flags: tuple[str, ...]
    dest: str
    call: ast.Call
    default: ast.expr | None
    action: str | None


def collect_options(facts: ModuleFacts) -> dict[str, ArgOption]:
    """argparse options by ``dest``; the first definition of a dest wins."""
    options: dict[str, ArgOption] = {}
    for site in facts.calls_named("add_argument"):
        flags = tuple(text for text in (string_value(arg) for arg in site.node.args) if text is not None)
        if not flags or not all(flag.startswith("-") for flag in flags):
            continue
        dest = string_value(keyword(site.node, "dest")) or _dest_from_flags(flags)
        action = string_value(keyword(site.node, "action"))
        options.setdefault(
            dest,
            ArgOption(
                flags=flags, dest=dest, call=site.node, default=keyword(site.node, "default"), action=action
            ),
        )
    return options


def _dest_from_flags(flags: tuple[str, ...]) -> str:
    long = [flag for flag in flags if flag.startswith("--")]
    chosen = long[0] if long else flags[0]
    return chosen.lstrip("-").replace("-", "_")


def set_defaults(facts: ModuleFacts) -> dict[str, ast.expr]:
    """``parser.set_defaults(dest=value)``: defaults that replace those of ``add_argument``."""
    found: dict[str, ast.expr] = {}
    for site in facts.calls_named("set_defaults"):
        for item in site.node.keywords:
            if item.arg:
                found[item.arg] = item.value
    return found


def configurator_line(facts: ModuleFacts) -> int | None:
    """The line of nanoGPT's ``exec(open('configurator.py').read())`` at module level, or None.

    From there on, a module-level global assigned before it is what the
    command line's ``--name=value`` made it.
    """
    for site in facts.calls_named("exec"):
        if site.scope is facts.module and site.node.args and "config" in ast.unparse(site.node.args[0]):
            return site.node.lineno
    return None
