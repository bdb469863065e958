"""The job agent's entry point: start the trainer and its capture first, then load the rest.

Started by a server as ``python -m arena_ls.lifecycle.launch RUN_DIR``.
Loading the agent (attrs, cattrs, psutil, the state folder's converters)
takes over 100 ms of imports, and neither the trainer nor its first lines
need wait for them: this module starts the trainer that ``spec.json``
describes with ``trainer_start`` (standard library only) and the pumps
that copy its output into the run's log, records it in ``state.json``
(which is what ``arena/start`` answers from), and hands all of it to
``Agent``, which takes over as if it had started the trainer itself.

Whatever goes wrong here (an unreadable spec, say) is left to the agent,
which starts the trainer the usual way and reports the problem.
"""

from __future__ import annotations

import sys
from pathlib import Path

from arena_ls import platform
from arena_ls.lifecycle.trainer_start import launch_from_spec, record_launch, watch_stop


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m arena_ls.lifecycle.launch RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    platform.become_subreaper()  # before the trainer exists, so no orphan of its escapes us
    early = launch_from_spec(run_dir)
    if early is not None:
        record_launch(run_dir, early)
        if early.process is not None:
            watch_stop(run_dir, early)
    # Imported only now, with the trainer running: its imports are what the trainer must not wait for.
    from arena_ls.lifecycle.agent import main as agent_main

    return agent_main([str(run_dir)], early=early)


if __name__ == "__main__":
    sys.exit(main())
