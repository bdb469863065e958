"""Cooperative stopper: polls ARENA_STOP_FILE every 100 ms and exits 0 when asked.

    python cooperative.py [MAX_SECONDS]

As the contract asks of a trainer: it polls the stop file every step (here a
100 ms step); SIGTERM only sets a flag that the loop checks, so the same
script stops cooperatively under supervisord (which sends SIGTERM) and under
arena-ls (which creates the stop file). Prints ``ready`` once its loop runs.
"""

from __future__ import annotations

import os
import signal
import sys
import time

POLL_SECONDS = 0.1
FLAG = {"stop": False}


def main(argv: list[str]) -> int:
    limit = float(argv[0]) if argv else 600.0
    stop_file = os.environ.get("ARENA_STOP_FILE", "")
    signal.signal(signal.SIGTERM, lambda *_: FLAG.update(stop=True))
    print("ready", flush=True)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if FLAG["stop"] or (stop_file and os.path.exists(stop_file)):
            print("stopping cooperatively", flush=True)
            return 0
        time.sleep(POLL_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
