"""Timestamp ticker: print lines that carry the moment they were written.

    python ticker.py RATE SECONDS [RATE SECONDS ...]

For each phase, prints ``tick PHASE SEQ STAMP`` at RATE lines a second for
SECONDS, where STAMP is ``time.perf_counter()`` just before the write (on
Linux the system-wide CLOCK_MONOTONIC, so the reader compares it with its
own clock). Lines are paced against a schedule, not by sleeping a fixed time
per line, so high rates are kept on a loaded machine: when the ticker is
behind, it writes at once; when ahead, it sleeps until the next line is due.
Between phases it pauses half a second, and it ends with ``ticker done``.
"""

from __future__ import annotations

import sys
import time


def tick_phase(phase: int, rate: float, seconds: float) -> None:
    write = sys.stdout.write
    flush = sys.stdout.flush
    count = int(rate * seconds)
    start = time.perf_counter()
    for seq in range(count):
        due = start + seq / rate
        now = time.perf_counter()
        if due > now:
            time.sleep(due - now)
        write(f"tick {phase} {seq} {time.perf_counter():.6f}\n")
        flush()


def main(argv: list[str]) -> int:
    pairs = [(float(argv[i]), float(argv[i + 1])) for i in range(0, len(argv) - 1, 2)]
    for phase, (rate, seconds) in enumerate(pairs):
        if phase:
            time.sleep(0.5)
        tick_phase(phase, rate, seconds)
    print("ticker done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
