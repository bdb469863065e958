"""A real Ray head on loopback for the cluster tests, one per test package.

The ``ray_head`` fixture is in ``tests/conftest.py`` (the Neovim test runs
a job on it too; each of the two packages gets its own head, ended after its
last test). ``tests/helpers/rayhead.py`` starts it (token auth on, free ports, two CPUs,
a process session of its own) and ends exactly it: its jobs are stopped first, then only
its processes. The tests skip, saying why, only when
``ray`` is not installed (CI installs it: ``scripts/bootstrap.sh``).
"""

from __future__ import annotations

from tests.helpers.rayhead import RayHead, free_port

__all__ = ["RayHead", "free_port"]
