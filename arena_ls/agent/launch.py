"""The job agent's entry point: start the trainer and its capture first, then load the rest.

Started by a server as ``python -m arena_ls.agent.launch RUN_DIR``, or
ahead of need as ``... launch --spare`` (a *spare agent*, POSIX): it loads
all of this, the agent included, and then waits on its stdin for the one
order its server sends when a run starts (``{"runDir": ..., "agentLog": ...}``
on one line). End-of-file instead (the server closed the pipe, or is gone)
makes it exit, having started nothing. See ``arena_ls.lifecycle.spare``.
Loading the agent (attrs, cattrs, psutil, the state folder's converters)
takes over 100 ms of imports, and neither the trainer nor its first lines
need wait for them: this module starts the trainer that ``spec.json``
describes with ``trainer_start`` (standard library only), records it in
``state.json`` (which is what ``arena/start`` answers from), starts the
pumps that copy its output into the run's log (only then: a trainer that
floods from its first instant fills its pipe meanwhile, not the disk the
record needs), and hands all of it to ``Agent``, which takes over as if it
had started the trainer itself.

Whatever goes wrong here (an unreadable spec, say) is left to the agent,
which starts the trainer the usual way and reports the problem. One thing
comes first: the agent claims its run (``claim_run``, an exclusive file in
the run folder); an agent that cannot starts nothing and exits
``CLAIM_REFUSED_EXIT``, so a run's trainer is started by one agent only.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from arena_ls import platform
from arena_ls.agent.exec_check import ExecRefused
from arena_ls.agent.trainer_start import (
    EarlyLaunch,
    claim_run,
    launch_from_spec,
    record_launch,
    watch_stop,
)
from arena_ls.run import agent_records, late_imports
from arena_ls.run.outputlog import ARENA


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == [SPARE_FLAG]:
        return serve_as_spare()
    if len(args) != 1:
        print(f"usage: python -m arena_ls.agent.launch RUN_DIR | {SPARE_FLAG}", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    refused = claim_run(run_dir)  # before anything of the run starts: one agent per run, ever
    if refused is not None:
        print(f"arena-ls: {refused}; nothing started", file=sys.stderr)
        return CLAIM_REFUSED_EXIT
    platform.become_subreaper()  # before the trainer exists, so no orphan of its escapes us
    folder = platform.open_folder(run_dir)  # where the run folder goes while the agent loads, it follows
    early = launch_from_spec(run_dir)
    if early is not None and isinstance(early.error, ExecRefused):
        return _refused(early)
    if early is not None:
        try:
            record_launch(run_dir, early)  # before its output is copied: a flood cannot fill the disk first
        finally:
            early.start_capture()
        if early.process is not None:
            watch_stop(run_dir, early)
    # Imported only now, with the trainer running: its imports are what the trainer must not wait
    # for. The pumps run meanwhile: one import at a time (``late_imports``).
    with late_imports.LOCK:
        _cache_generated_code()
        from arena_ls.agent.local.agent import main as agent_main

    return agent_main([str(run_dir)], early=early, folder=folder)


def _refused(early: EarlyLaunch) -> int:
    """A gated path changed since the gates passed: nothing starts, and the server answers
    1009 with the evidence (the agent log's last line, ``launch_evidence``)."""
    evidence = str(early.error)
    early.writer.append_line(ARENA, agent_records.note(f"refused to start: {evidence}").encode())
    early.writer.close()
    print(f"arena-ls: refused to start the trainer: {evidence}", file=sys.stderr, flush=True)
    return CLAIM_REFUSED_EXIT


SPARE_FLAG = "--spare"
CLAIM_REFUSED_EXIT = 3
"""The exit code of an agent that could not claim its run (``claim_run``): it started nothing."""


def serve_as_spare() -> int:
    """Wait for the run to take while the agent loads; exit 0 at end-of-file, having started nothing.

    The agent loads on a thread, so an order that arrives before it has
    loaded starts the trainer at once, as a cold launch would, and only the
    agent's takeover waits for the rest of its imports.
    """
    # What the trainer's start itself imports (psutil, for the first record's creation times) is
    # loaded here, before the agent's thread starts: the start never waits on that thread's imports.
    import psutil  # noqa: F401

    threading.Thread(target=_load_agent, name="load-agent", daemon=True).start()
    order = read_order(sys.stdin.buffer.readline())
    if order is None:
        return 0
    run_dir, agent_log = order
    platform.take_run_stdio(agent_log)
    return main([run_dir])


def _load_agent() -> None:
    with late_imports.LOCK:  # a run may have started meanwhile: its pumps import too
        _cache_generated_code()
        import arena_ls.agent.local.agent  # noqa: F401  (what a cold launch loads after the trainer started)


def _cache_generated_code() -> None:
    """The agent's classes' generated methods from the cache of earlier starts (``arena_ls.codecache``)."""
    from arena_ls import codecache

    codecache.install()


def read_order(line: bytes) -> tuple[str, str] | None:
    """The run a spare is handed: (run folder, agent log); None at end-of-file or for a garbled order."""
    try:
        order: Any = json.loads(line)
        run_dir, agent_log = order["runDir"], order["agentLog"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(run_dir, str) or not isinstance(agent_log, str):
        return None
    return run_dir, agent_log


if __name__ == "__main__":
    sys.exit(main())
