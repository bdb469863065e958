"""A real Ray head on loopback for the cluster tests, one for the whole package.

Package scope, not session scope: the head (about 0.7 GiB and some idle CPU)
goes away after the last cluster test instead of weighing on the rest of
the suite.

``benchmarks/rayhead.py`` starts it (token auth on, free ports, two CPUs, a
process session of its own) and ends exactly it: its jobs are stopped
first, then only its processes. The tests skip, saying why, only when
``ray`` is not installed (CI installs it: ``scripts/bootstrap.sh``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from benchmarks import rayhead
from benchmarks.rayhead import RayHead, free_port

__all__ = ["RayHead", "free_port"]


@pytest.fixture(scope="package")
def ray_head() -> Iterator[RayHead]:
    if sys.platform == "win32":
        pytest.skip("the test head is ended through its POSIX process group; Windows is not covered")
    if not rayhead.ray_installed():
        pytest.skip("ray is not installed: pip install 'arena-ls[ray]' (CI installs it)")
    with rayhead.ray_head() as head:
        yield head
