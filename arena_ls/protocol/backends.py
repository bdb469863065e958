"""The run back ends of a server, composed where the server is built.

The seam (``lifecycle/backends/base.py``) knows no implementation; the
supervisor is handed this list and asks it which back end takes a job.
This machine comes first (the default: it keeps a spare agent while the
workspace is idle), then Ray clusters (``cluster/backend.py``: jobs with
``runOn``). A new place to run is one more entry here.
"""

from __future__ import annotations

from arena_ls.cluster.backend import RayBackend
from arena_ls.lifecycle.backends.base import Backends
from arena_ls.lifecycle.backends.local import LocalBackend
from arena_ls.lifecycle.spare import SpareAgent

SPARE_WHEN_IDLE_FOR = 3.0
"""Seconds the workspace stays idle (just opened, or its run just ended) before a spare agent
loads: a spare is for a start a person makes later; its interpreter, loading on one of two
cores, takes no CPU from start-up's first requests (issue 38 item 7); and a session that ends or
starts a run sooner (the CLI's own servers, most of the test suite's) never paid an interpreter
that went unused. Measured: 418 spares in one run of the suite, 115 s of CPU, most of them never handed a
run (docs/performance.md, "Where the suite's CPU goes")."""


def server_backends() -> Backends:
    """A fresh set of back ends for one workspace (each holds its own spare agent)."""
    spare = SpareAgent(idle_for=SPARE_WHEN_IDLE_FOR)
    return Backends(LocalBackend(spare), RayBackend())
