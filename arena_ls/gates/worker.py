"""The gates' worker process (issue 39 item 6): ``python -m arena_ls.gates.worker``.

Reads requests from stdin and answers on stdout, one at a time, each a
4-byte big-endian length and a pickle: the request ``(source, fp32_only,
checkpoint_patterns, jobs)``, the answer the list of ``Finding``. Only the server
that started it writes to it (its own child, through a pipe). It ends at the
end of its input (its server gone), and quietly when an answer meets a closed
pipe (its server gone while a lint ran). A lint that runs past the budget or grows
past it is the server's to stop: it kills this process (``budget.GateBudget``).
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import BinaryIO

from arena_ls.gates import lint_trainer

HEADER = struct.Struct(">I")


def read_message(stream: BinaryIO) -> bytes | None:
    """One length-prefixed message, or None at the end of the stream."""
    head = stream.read(HEADER.size)
    if len(head) < HEADER.size:
        return None
    (length,) = HEADER.unpack(head)
    body = stream.read(length)
    return body if len(body) == length else None


def write_message(stream: BinaryIO, body: bytes) -> None:
    stream.write(HEADER.pack(len(body)) + body)
    stream.flush()


def serve(inbox: BinaryIO, outbox: BinaryIO) -> int:
    while True:
        message = read_message(inbox)
        if message is None:
            return 0
        source, fp32_only, patterns, jobs = pickle.loads(message)
        findings = lint_trainer(
            source, fp32_only=fp32_only, checkpoint_patterns=tuple(patterns), jobs=tuple(jobs)
        )
        write_message(outbox, pickle.dumps(findings))


def main() -> int:
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    try:
        return serve(sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:
        # The server ended while a lint ran (a session closed just after its first status): nobody
        # waits for the answer. Quietly: a traceback here landed in the server's stderr.
        _drop_what_is_left_to_write()
        return 0


def _drop_what_is_left_to_write() -> None:
    """Point stdout at the null device, so that the flush at exit has nowhere to fail."""
    with open(os.devnull, "wb") as null:
        os.dup2(null.fileno(), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
