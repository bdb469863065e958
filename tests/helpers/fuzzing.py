"""How many examples a property test (Hypothesis) tries: all of them, except in the fast lane.

The fast lane (``pytest -m "not process"``, run on every save) tries a fifth of each test's
examples, at least ``FAST_LANE_FLOOR``: enough to catch a change that breaks a property outright,
cheap enough to keep the lane fast. Every other run, CI's included, tries them all; so does the
fast lane with ``ARENA_FUZZ=full``. A property test writes its count through ``examples``::

    @settings(max_examples=examples(300), deadline=None)

Decided once, at ``pytest_configure`` (``tests/conftest.py`` calls ``register``), before any test
module is imported, so the decorators read the answer; each ``pytest -n`` worker decides the same
way from the same options.
"""

from __future__ import annotations

import os

import pytest

FAST_LANE_SHARE = 5
"""The fast lane tries one example in this many."""
FAST_LANE_FLOOR = 10
"""...and never fewer than this many."""
FULL_RUN_VARIABLE = "ARENA_FUZZ"

_fast_lane = False


def is_fast_lane(markexpr: str, environ: dict[str, str] | os._Environ[str]) -> bool:
    """Whether the run leaves out the tests that start processes and was not asked for every example."""
    leaves_out_processes = "not process" in " ".join(markexpr.split())
    return leaves_out_processes and environ.get(FULL_RUN_VARIABLE, "") != "full"


def register(config: pytest.Config) -> None:
    global _fast_lane
    _fast_lane = is_fast_lane(str(config.getoption("markexpr", "") or ""), os.environ)


def examples(full: int) -> int:
    """The number of examples to try: ``full``, or the fast lane's share of it."""
    if not _fast_lane:
        return full
    return min(full, max(FAST_LANE_FLOOR, full // FAST_LANE_SHARE))
