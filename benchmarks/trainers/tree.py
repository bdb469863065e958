"""Tree spawner: a tree of 50 processes that all ignore SIGTERM.

    python tree.py [TOTAL] [FANOUT]

The trainer (the root) forks FANOUT children, each of which forks
grandchildren until the tree has TOTAL processes, the root included
(default 50 = 1 + 7 + 42). Every process ignores SIGTERM before it forks,
so only a kill of the whole tree ends it. Each descendant reports on a pipe
once it is set up; the root then prints ``tree ready N PIDS...`` and sleeps.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


def _spawn_child(grandchildren: int, report: int) -> None:
    """Fork one child that forks ``grandchildren`` of its own; all report their pid."""
    if os.fork() != 0:
        return
    for _ in range(grandchildren):
        if os.fork() == 0:
            os.write(report, f"{os.getpid()}\n".encode())
            _sleep_forever()
    os.write(report, f"{os.getpid()}\n".encode())
    _sleep_forever()


def main(argv: list[str]) -> int:
    total = int(argv[0]) if argv else 50
    fanout = int(argv[1]) if len(argv) > 1 else 7
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    read_end, write_end = os.pipe()
    descendants = total - 1
    per_child, extra = divmod(descendants - fanout, fanout)
    for index in range(fanout):
        _spawn_child(per_child + (1 if index < extra else 0), write_end)
    os.close(write_end)
    pids: list[str] = []
    with os.fdopen(read_end) as reports:
        while len(pids) < descendants:
            line = reports.readline()
            if not line:
                break
            pids.append(line.strip())
    print(f"tree ready {len(pids) + 1} {os.getpid()} {' '.join(pids)}", flush=True)
    _sleep_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
