"""``arena-ls``: the language server's entry point (stdio by default, TCP on loopback)."""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import os
import sys
from pathlib import Path
from typing import Any

LOOPBACK_NAMES = {"localhost"}


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


DESCRIPTION = (
    "arena-ls: the language server that runs, watches and stops training jobs. "
    "Editors start it on stdio; it binds TCP on loopback only."
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="arena-ls", description=DESCRIPTION)
    parser.add_argument("--stdio", action="store_true", help="serve JSON-RPC over stdio (default)")
    parser.add_argument("--tcp", action="store_true", help="serve TCP on loopback")
    parser.add_argument("--host", default="127.0.0.1", help="loopback address for --tcp")
    parser.add_argument("--port", type=int, default=2087, help="port for --tcp (default 2087)")
    parser.add_argument(
        "--token-file",
        help="with --tcp: the file holding the token clients must send "
        "(default: a fresh one written to <stateDir>/tcp-token)",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("ARENA_LS_LOG", "INFO"),
        help="log level on stderr (default: $ARENA_LS_LOG, else INFO)",
    )
    args = parser.parse_args(argv)
    if args.tcp and not _is_loopback(args.host):
        parser.error(f"--host {args.host}: arena-ls binds to loopback only (127.0.0.1, ::1, localhost)")
    return args


def _protect_stdout() -> Any:
    """Keep fd 1 for the protocol alone: anything else printed goes to stderr."""
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "wb", buffering=0)


class _QuietRefusals(logging.Filter):
    """Refusals and bad params are answers, not server errors: keep them out of stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        from pygls.exceptions import JsonRpcException, JsonRpcInternalError  # start-up speed: see main()

        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, JsonRpcException) and not isinstance(error, JsonRpcInternalError))


def _level(name: str) -> int:
    """The logging level called ``name`` (INFO for a name logging does not know)."""
    level = logging.getLevelName(name.upper())
    return level if isinstance(level, int) else logging.INFO


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=_level(level),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("pygls", "pygls.protocol", "pygls.server", "pygls.feature_manager"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("pygls.protocol.json_rpc").addFilter(_QuietRefusals())


SWITCH_INTERVAL = 0.001
"""How long the event loop's thread waits for the GIL at most while a worker thread computes
(Python's default is 5 ms). During a flood the follower's worker reads and decodes the run's
records; each system call a request makes (a ``stat``, the answer's write) hands the GIL to that
worker, and taking it back waited up to the whole interval: an ``arena/status`` of some thirty
calls waited tens of milliseconds for the GIL alone (issue 24, ``notify.*.status_p99_ms``)."""


def main(argv: list[str] | None = None, *, hardware: Any = None) -> int:
    args = parse_args(argv)
    configure_logging(args.log_level)
    gc.disable()  # start-up speed: see _load_and_create
    try:
        server = _load_and_create(hardware)
    finally:
        gc.collect()
        gc.freeze()
        gc.enable()
    from arena_ls.protocol.rpc import serving  # start-up speed: see _load_and_create

    if not args.tcp:
        return serving.serve_stdio(server, sys.stdin.buffer, _protect_stdout())

    try:
        token, token_path = serving.tcp_token(args.token_file, _default_state_dir(), Path.cwd())
    except (OSError, ValueError) as error:
        print(f"arena-ls: cannot set up the TCP token: {error}", file=sys.stderr)
        return 2
    print(f"arena-ls: TCP token in {token_path} (send it as initializationOptions.token)", file=sys.stderr)
    return serving.serve_tcp(server, args.host, args.port, token)


def _load_and_create(hardware: Any) -> Any:
    """Load the server's stack and build the server, with the garbage collector off (``main``).

    The stack loads after the arguments are checked (``--help`` is instant), its classes'
    generated methods from the cache of earlier starts (``arena_ls.codecache``). Loading makes
    some 120,000 objects (lsprotocol's 550 classes and their methods, pygls', ours) that live as
    long as the server, and the collections their allocations set off walked them again and
    again for nothing. ``main`` then collects once (the load's garbage: some 20,000 objects,
    8.6 MiB, the classes attrs replaced with their slotted copies) and freezes what is left
    (``gc.freeze``), so that no later collection walks it. A server's session (``initialize``,
    a status, ``shutdown``) took 0.85-1.03 s of CPU before, 0.65-0.86 s after (8 each,
    alternated: docs/performance.md, "Where the suite's CPU goes")."""
    from arena_ls import loopcheck  # standard library only

    loopcheck.install_from_environment()
    sys.setswitchinterval(SWITCH_INTERVAL)
    from arena_ls import codecache

    codecache.install()
    from arena_ls.protocol.app import create_server

    server = create_server(hardware=hardware)
    if hardware is not None:
        from arena_ls.health.agent_hardware import share_with_agents

        share_with_agents(hardware)
    return server


def _default_state_dir() -> Path:
    """The state folder of the workspace the server starts in (its cwd): where the token goes."""
    from arena_ls.settings import Settings  # start-up speed: only --tcp needs it

    state_dir = Path(Settings().state_dir)
    return state_dir if state_dir.is_absolute() else Path.cwd() / state_dir


if __name__ == "__main__":
    sys.exit(main())
