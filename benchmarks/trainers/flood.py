"""Flood writer: print N numbered lines of 74 bytes as fast as Python can.

    python flood.py N [--buffered]

Line ``i`` is ``{10**10 + i} INFO data shard ...`` (11 digits, then a fixed
tail), 74 bytes with its newline, so 5,000,000 lines make 370 MB. The
number is offset by 10**10 so that every line has the same width without a
costly format spec: the writer spends its time writing, not formatting.

Without ``--buffered`` it writes through ``sys.stdout`` as the interpreter
set it up (with ``PYTHONUNBUFFERED=1``, as arena-ls runs trainers, that is
one ``write`` call per line). With ``--buffered`` it reopens fd 1 exactly as
Python does without that variable (a block-buffered text stream), so the
buffered mode is the same under every runner, including arena-ls, whose
agent always sets ``PYTHONUNBUFFERED=1``.

The text is neutral on purpose (no ``loss``, no ``/``, no ``@arena``): this
measures capture, not the progress parser, which arena-ls runs only on
chunks that could hold an announcement.
"""

from __future__ import annotations

import sys

BASE = 10**10
TAIL = " INFO data shard 0042 batch ok checksum 9f3a2c1b elapsed 0.001\n"
LINE_BYTES = len(str(BASE)) + len(TAIL)


def main(argv: list[str]) -> int:
    count = int(argv[0])
    out = sys.stdout
    if "--buffered" in argv[1:]:
        out = open(sys.stdout.fileno(), "w", buffering=-1, encoding="utf-8", closefd=False)  # noqa: SIM115
    write = out.write
    for number in range(BASE, BASE + count):
        write(f"{number}{TAIL}")
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
