"""A job for the cluster benchmark: ``ready``, then ``tick SEQ STAMP`` every INTERVAL seconds, until SIGTERM.

STAMP is ``time.perf_counter()`` (on Linux the system-wide CLOCK_MONOTONIC: the
benchmark, on the same machine as the Ray head, compares it with its own).
SIGTERM sets a flag; the loop then prints ``bye`` and exits 0.
"""

from __future__ import annotations

import signal
import sys
import time

STOP = {"flag": False}


def main() -> int:
    interval = float(sys.argv[1]) if len(sys.argv) > 1 else 0.1
    signal.signal(signal.SIGTERM, lambda *_: STOP.update(flag=True))
    print("ready", flush=True)
    seq = 0
    while not STOP["flag"]:
        print(f"tick {seq} {time.perf_counter():.6f}", flush=True)
        seq += 1
        time.sleep(interval)
    print("bye", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
