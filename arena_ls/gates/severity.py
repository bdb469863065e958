"""A tunable gate's severity here (contract 7.3): AR010 by the device, ``gates.severity`` by workspace.

The seed's rule "never ``num_workers > 0`` on Windows" makes ``AR010`` an
error where the device profile is Windows (a DataLoader's workers there are
spawned processes that copy the in-memory data: 5 to 50 times slower), a
warning elsewhere. Setting ``gates.severity`` then sets ``AR010``, ``AR011``
and ``AR012`` per workspace, over both. A pure policy: the caller says
whether the device is Windows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from arena_ls.diagnostics import Diag, Severity

TUNABLE = frozenset({"AR010", "AR011", "AR012"})
WINDOWS_SEVERITIES: Mapping[str, Severity] = {"AR010": "error"}


def gate_severities(windows: bool, overrides: Mapping[str, str]) -> dict[str, Severity]:
    """The severities that replace the rules' own: the device's, then the workspace's setting."""
    chosen: dict[str, Severity] = dict(WINDOWS_SEVERITIES) if windows else {}
    for code, level in overrides.items():
        if code in TUNABLE and level in ("error", "warning", "information"):
            chosen[code] = level  # type: ignore[assignment]  # checked just above
    return chosen


def with_severities(diags: Iterable[Diag], chosen: Mapping[str, Severity]) -> list[Diag]:
    """``diags`` with each tunable gate's severity replaced by its chosen one."""
    return [dataclasses.replace(d, severity=chosen[d.code]) if d.code in chosen else d for d in diags]
