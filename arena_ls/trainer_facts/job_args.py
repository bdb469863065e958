"""The command-line arguments a manifest job gives its trainer, as the gates read them.

A trainer's cadence is often an option (``--ckpt-every``, default 50000) or,
in nanoGPT's style, a module-level global that ``configurator.py`` overrides
with ``--name=value``. The job that runs the trainer may set it
(``"args": ["train.py", "--ckpt-every", "500"]``): then the gates judge the
value the job gives, not the default. ``JobArgs`` holds one job's arguments
after the script; ``option_value`` reads an argparse option the way argparse
does (``--x V`` or ``--x=V``, the last one wins, nothing after ``--``), and
``configurator_value`` nanoGPT's ``--name=value`` (its only form).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True, slots=True)
class JobArgs:
    """One job's id and the arguments it passes to the trainer (those after the script)."""

    job: str
    args: tuple[str, ...]

    def option_value(self, flags: Sequence[str]) -> tuple[str, str] | None:
        """``(flag, value)`` of the last of ``flags`` given, or None (``--x V`` and ``--x=V``)."""
        found: tuple[str, str] | None = None
        arguments = self.args
        for index, argument in enumerate(arguments):
            if argument == "--":
                break
            for flag in flags:
                if argument == flag and index + 1 < len(arguments):
                    found = (flag, arguments[index + 1])
                elif argument.startswith(flag + "="):
                    found = (flag, argument[len(flag) + 1 :])
        return found

    def flag_given(self, flags: Sequence[str]) -> str | None:
        """The last of ``flags`` given alone (a ``store_true`` switch), or None."""
        found = None
        for argument in self.args:
            if argument == "--":
                break
            if argument in flags:
                found = argument
        return found

    def configurator_value(self, name: str) -> str | None:
        """nanoGPT's ``--name=value`` (``configurator.py`` reads no other form), the last one.

        The configurator applies its arguments in order, and a config file (an
        argument without ``--``) may set any global: a ``--name=value`` followed by
        one is not known to hold, so it is not taken (the default is judged).
        """
        found = None
        prefix = "--" + name + "="
        for argument in self.args:
            if argument.startswith(prefix):
                found = argument[len(prefix) :]
            elif not argument.startswith("--"):
                found = None  # a config file after it may set it again
        return found


def literal(text: str) -> object:
    """A command-line value as the trainer reads it: ``500`` an int, ``'x'`` a string.

    argparse's ``type=int`` and nanoGPT's ``literal_eval`` agree on numbers;
    anything that is not a Python literal stays the string it is.
    """
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def trainer_arguments(args: Sequence[str], script: str | None) -> tuple[str, ...]:
    """The arguments after the trainer script in a job's ``args``.

    The script is the argument that names it (``script``, or the same file
    name), else the first ``.py``; ``-m module`` is a script too. With none of
    them, every argument is the trainer's.
    """
    names = {script, script.replace("\\", "/").rsplit("/", 1)[-1]} if script else set()
    for index, argument in enumerate(args):
        if argument in names or argument.replace("\\", "/").rsplit("/", 1)[-1] in names:
            return tuple(args[index + 1 :])
    for index, argument in enumerate(args):
        if argument.endswith(".py"):
            return tuple(args[index + 1 :])
    for index, argument in enumerate(args[:-1]):
        if argument == "-m":
            return tuple(args[index + 2 :])
    return tuple(args)
