"""``arena``: the terminal client of arena-ls, for people and scripts.

It starts ``arena-ls`` as a child and speaks LSP to it like any editor. Exit
status: 0 ok, 1 the run failed or was refused, 2 usage, 130 interrupted (the
client left; a run goes on). Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from arena_ls.client import commands, interrupted
from arena_ls.client.autostart import AFTER_REBOOT_CHOICES
from arena_ls.client.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    from_rpc_error,
    from_server_exit,
    one_line,
)
from arena_ls.client.lspclient import JsonRpcError, ServerExited
from arena_ls.client.render import make_console
from arena_ls.client.session import Options, find_root
from arena_ls.client.visible_controls import visible
from arena_ls.validation import Check, integer, number

DESCRIPTION = "The terminal client of arena-ls: start, follow, stop and inspect training runs."
EPILOG = (
    "exit status: 0 ok, 1 the run failed or was refused, 2 usage, "
    "130 interrupted (the client left; the run goes on)"
)

Command = Callable[[Options, argparse.Namespace], Coroutine[Any, Any, int]]
T = TypeVar("T")


class UsageError(Exception):
    """Bad command-line arguments (exit status 2)."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def _common() -> Parser:
    """``--root`` and ``--verbose``, accepted after the command too."""
    common = Parser(add_help=False)
    common.add_argument(
        "--root",
        type=Path,
        default=argparse.SUPPRESS,
        help="workspace root (default: the nearest folder with training/manifest.json)",
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the language server's log on stderr",
    )
    return common


def build_parser() -> Parser:
    # Two copies of the common options: argparse shares a parent's actions, so the
    # top level's defaults would otherwise be the subcommand's too, and a value
    # given before the subcommand would be overwritten by that default.
    parser = Parser(prog="arena", description=DESCRIPTION, epilog=EPILOG, parents=[_common()])
    parser.set_defaults(root=None, verbose=False)
    common = _common()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    _add_check(sub, common)
    init = sub.add_parser(
        "init",
        parents=[common],
        help="create training/manifest.json, and add SCRIPT as a train job (no server)",
    )
    init.add_argument("script", nargs="?", metavar="SCRIPT", help="the trainer to add")
    _add_start(sub, common)
    _add_stop(sub, common)
    status = sub.add_parser("status", parents=[common], help="jobs, the active run and health")
    status.add_argument("--json", action="store_true", help="the raw arena/status result as JSON")
    _add_logs(sub, common)
    demo = sub.add_parser("demo", parents=[common], help="train tiny-lm and show its checkpoints")
    demo.add_argument(
        "--fresh",
        action="store_true",
        help="start over instead of resuming (a run that finished all its steps starts over anyway)",
    )
    _add_raw(demo)
    _add_laptop(sub, common)
    plot = sub.add_parser("plot", parents=[common], help="a run's loss curve as a PNG")
    plot.add_argument("job", nargs="?", metavar="JOB")
    plot.add_argument(
        "--out",
        metavar="FILE",
        help="the PNG to write (default: .aide/plots/JOB-loss.png in the workspace root; "
        "the folder is ignored by git)",
    )
    return parser


def _add_check(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    check = sub.add_parser("check", parents=[common], help="lint trainers and the manifest (no server)")
    check.add_argument("paths", nargs="*", metavar="PATH")
    check.add_argument("--format", choices=("text", "json"), default="text")
    check.add_argument(
        "--fp32-only",
        action="store_true",
        help="the GPU has no fast half precision: report mixed precision",
    )


def _add_start(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    start = sub.add_parser("start", parents=[common], help="start a job from the manifest")
    start.add_argument("job", metavar="JOB")
    start.add_argument("--approve", action="store_true", help="approve a job that needs approval")
    start.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="follow the run until it ends (Ctrl-C detaches; Ctrl-C twice stops the run)",
    )
    start.add_argument(
        "--probe",
        action="store_true",
        help="run the job's VRAM probe (its probe.args) instead; follows it to its verdict "
        "(exit 1 unless it passed)",
    )
    _add_raw(start)
    start.add_argument(
        "--confirm",
        action="store_true",
        help="start even at a --start-step other than the job's last checkpoint",
    )
    resume = start.add_mutually_exclusive_group()
    resume.add_argument("--fresh", action="store_true", help="do not resume from the last checkpoint")
    resume.add_argument("--start-step", type=_count, metavar="N", help="resume from step N")


def _add_stop(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    stop = sub.add_parser("stop", parents=[common], help="stop the active run (cooperatively)")
    stop.add_argument("job", nargs="?", metavar="JOB")
    stop.add_argument("--kill", action="store_true", help="kill the process tree at once")
    stop.add_argument(
        "--confirm",
        action="store_true",
        help="stop even a train run with no checkpoint (its work is lost)",
    )
    stop.add_argument("--grace", type=_seconds, metavar="S", help="seconds the cooperative stop may take")
    _add_raw(stop)


def _add_logs(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    logs = sub.add_parser("logs", parents=[common], help="a run's log (the active run, else JOB's latest)")
    logs.add_argument("job", nargs="?", metavar="JOB")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="then follow it live until it ends (Ctrl-C detaches, never stops the run)",
    )
    logs.add_argument("--run", metavar="RUN_ID", help="a particular run")
    _add_raw(logs)


def _add_laptop(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    """``resume-interrupted`` and ``autostart`` (contract 8.3: a restart of the machine)."""
    resume = sub.add_parser(
        "resume-interrupted",
        parents=[common],
        help="resume (or offer) the runs a restart of the machine interrupted, per watchdog.afterReboot",
    )
    _add_after_reboot(resume)
    autostart = sub.add_parser(
        "autostart",
        parents=[common],
        help="run `arena resume-interrupted` in this workspace at each logon (install, remove, status)",
    )
    autostart.add_argument("action", choices=("install", "remove", "status"))
    _add_after_reboot(autostart)


def _add_after_reboot(parser: Parser) -> None:
    parser.add_argument(
        "--after-reboot",
        choices=AFTER_REBOOT_CHOICES,
        default=None,
        help="watchdog.afterReboot for this command (default: the settings in $ARENA_SETTINGS, else ask)",
    )


def _add_raw(parser: Parser) -> None:
    parser.add_argument(
        "--raw",
        action="store_true",
        help="show every line as logged, the trainer's @arena announcements too (hidden by default)",
    )


def _argument(check: Check[T], read: Callable[[str], Any]) -> Callable[[str], T]:
    """An argparse ``type`` that reads the text with ``read`` and accepts what ``check`` accepts."""

    def parse(text: str) -> T:
        try:
            value = read(text)
        except ValueError:
            value = None
        if not check.accepts(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {check.expected}")
        return check.convert(value)

    return parse


_count = _argument(integer(minimum=0), int)
_seconds = _argument(number(minimum=0).worded("a number of seconds >= 0"), float)


COMMANDS: dict[str, Command] = {
    "start": commands.cmd_start,
    "stop": commands.cmd_stop,
    "status": commands.cmd_status,
    "logs": commands.cmd_logs,
    "demo": commands.cmd_demo,
    "plot": commands.cmd_plot,
    "resume-interrupted": interrupted.cmd_resume_interrupted,
    "autostart": interrupted.cmd_autostart,
}


def dispatch(args: argparse.Namespace) -> int:
    root = (args.root or find_root(Path.cwd())).resolve()
    if args.command == "check":
        from arena_ls.client.lint import run_check

        return run_check(args, root)
    if args.command == "init":
        from arena_ls.client.init import run_init

        return run_init(args, root)
    options = Options(root=root, verbose=bool(args.verbose), console=make_console())
    return asyncio.run(COMMANDS[args.command](options, args))


def _configure_stdio() -> None:
    """Never fail on a character the terminal cannot show."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="replace")


def _fail(message: str, code: int) -> int:
    print(f"arena: {visible(message)}", file=sys.stderr, flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    _configure_stdio()
    try:
        args = build_parser().parse_args(argv)
    except UsageError as error:
        print(error, file=sys.stderr, flush=True)
        return EXIT_USAGE
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else 0
    try:
        return dispatch(args)
    except CliError as error:
        return _fail(error.message, error.exit_code)
    except JsonRpcError as error:
        converted = from_rpc_error(error)
        return _fail(converted.message, converted.exit_code)
    except ServerExited as error:
        return _fail(from_server_exit(error).message, EXIT_FAILED)
    except KeyboardInterrupt:
        return _fail("interrupted; a run goes on (see `arena status`)", EXIT_INTERRUPTED)
    except Exception as error:  # the promise: one line, never a traceback
        return _fail(f"internal error: {type(error).__name__}: {one_line(str(error))}", EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
