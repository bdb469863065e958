"""Sleeper: an idle trainer that only waits, for the idle-cost benchmark.

    python sleeper.py SECONDS

Sleeps in one call (no polling of its own, so all the CPU measured around
it is the supervisor's) and exits 0. A stop asks it through SIGTERM or the
stop file; the benchmark ends it with ``arena/stop`` and ``kill: true``.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    print("sleeping", flush=True)
    time.sleep(float(argv[0]) if argv else 3600.0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
