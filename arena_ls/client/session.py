"""Where the client works (the workspace root) and its session with a child ``arena-ls``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
from rich.console import Console

from arena_ls.client.errors import CliError
from arena_ls.client.lspclient import LspSession, server_command

MANIFEST = Path("training") / "manifest.json"


def on_a_terminal() -> bool:
    """Whether a person is there to answer: stdin and stdout are both a terminal."""
    return sys.stdin is not None and sys.stdin.isatty() and sys.stdout is not None and sys.stdout.isatty()


def ask_on_the_terminal(question: str) -> bool:
    """``question [y/N]`` on the terminal; only ``y`` or ``yes`` is yes (end of input is no)."""
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


@attrs.frozen
class Options:
    """What every command needs: the workspace root, verbosity and the output console,
    and whether (and how) a refusal that is a question can be put to the person."""

    root: Path
    verbose: bool
    console: Console
    interactive: bool = attrs.field(factory=on_a_terminal)
    ask: Callable[[str], bool] = ask_on_the_terminal


def find_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` with ``training/manifest.json``, else ``start``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / MANIFEST).is_file():
            return folder
    return start


SETTINGS_VARIABLE = "ARENA_SETTINGS"
"""A JSON file of arena settings for the terminal client (an editor has its own settings):
``{"clusters": {"lab": {"address": ..., "tokenFile": ...}}}``, say."""


def init_options() -> dict[str, Any]:
    """Trainers run with the interpreter that runs ``arena``; ``$ARENA_SETTINGS`` adds the user's settings."""
    options: dict[str, Any] = {"python": sys.executable}
    path = os.environ.get(SETTINGS_VARIABLE)
    if path:
        try:
            extra = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise CliError(f"{SETTINGS_VARIABLE}={path}: cannot read its settings: {error}", 2) from None
        if not isinstance(extra, dict):
            raise CliError(f"{SETTINGS_VARIABLE}={path}: the settings must be a JSON object", 2)
        section = extra.get("arena")
        options.update(section if isinstance(section, dict) else extra)
    return options


@contextlib.asynccontextmanager
async def connect(options: Options, settings: dict[str, Any] | None = None) -> AsyncIterator[LspSession]:
    """A started, initialized session; shut down cleanly at the end (runs go on). ``settings``
    are applied over the user's (a command's own choice, ``--after-reboot``)."""
    if not options.root.is_dir():
        raise CliError(f"workspace root {options.root} is not a folder", 2)
    stderr = None if options.verbose else subprocess.DEVNULL
    try:
        session = await LspSession.launch(server_command(), cwd=options.root, stderr=stderr)
    except OSError as error:
        raise CliError(f"cannot start arena-ls: {error}") from error
    try:
        await session.initialize(options.root, {**init_options(), **(settings or {})})
        yield session
    finally:
        await session.close()
