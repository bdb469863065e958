"""The gates' worker process when its server has gone (``arena_ls/gates/worker.py``).

A session that ends just after its first status leaves a lint under way in the worker: its answer
meets a closed pipe. The worker ends quietly then; its traceback used to land in the server's
stderr (``test_no_nvml_is_a_normal_state`` caught one, once in eight runs).
"""

from __future__ import annotations

import pickle
import subprocess
import sys

from arena_ls.gates.worker import HEADER

DEADLINE_S = 60.0
TRAINER = "import torch\nfor step in range(10):\n    pass\n" * 200


def test_an_answer_nobody_reads_ends_the_worker_quietly() -> None:
    worker = subprocess.Popen(
        [sys.executable, "-m", "arena_ls.gates.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert worker.stdin is not None and worker.stdout is not None and worker.stderr is not None
    request = pickle.dumps((TRAINER, None, [], []))
    worker.stdout.close()  # the server is gone before the answer
    worker.stdin.write(HEADER.pack(len(request)) + request)
    worker.stdin.close()
    errors = worker.stderr.read().decode("utf-8", "replace")
    assert worker.wait(DEADLINE_S) == 0
    assert errors == ""
