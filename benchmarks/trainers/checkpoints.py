"""Checkpoint announcer: N ``@arena`` checkpoint events (and a progress event every 100), then exit.

    python checkpoints.py N

Each line is ``@arena {"event": "checkpoint", "step": S, "path": "ckpt/step-S.pt"}``, written
block-buffered (the announcements are what is measured, not the trainer's write calls).
No file is saved: the run's log is what ``arena/metrics`` reads.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    count = int(argv[0])
    out = open(sys.stdout.fileno(), "w", buffering=1 << 16, encoding="utf-8", closefd=False)  # noqa: SIM115
    write = out.write
    for step in range(1, count + 1):
        write(f'@arena {{"event": "checkpoint", "step": {step}, "path": "ckpt/step-{step}.pt"}}\n')
        if step % 100 == 0:
            write(f'@arena {{"event": "progress", "step": {step}, "total": {count}, "loss": 1.5}}\n')
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
