"""Refusals with the contract's error codes and reasons (section 4.3).

Raised by the lifecycle and turned into JSON-RPC errors by the protocol
layer; the terminal client prints them as one line.
"""

from __future__ import annotations

from typing import Any

NOT_ALLOWLISTED = (1001, "not-allowlisted")
APPROVAL_REQUIRED = (1002, "approval-required")
ALREADY_RUNNING = (1003, "already-running")
GATES_FAILED = (1004, "gates-failed")
PREFLIGHT_FAILED = (1005, "preflight-failed")
INVALID_MANIFEST = (1006, "invalid-manifest")
NO_CHECKPOINT = (1007, "no-checkpoint")
DISABLED = (1008, "disabled")
LAUNCH_FAILED = (1009, "launch-failed")
PROBE_REQUIRED = (1010, "probe-required")
CHECKPOINT_MISMATCH = (1011, "checkpoint-mismatch")
ALREADY_FINISHED = (1012, "already-finished")
CLUSTER_UNREACHABLE = (1013, "cluster-unreachable")
"""Not in the contract: ``arena/stop`` of a cluster run whose head cannot be told (docs/clusters.md)."""

REFUSALS: tuple[tuple[int, str], ...] = (
    NOT_ALLOWLISTED,
    APPROVAL_REQUIRED,
    ALREADY_RUNNING,
    GATES_FAILED,
    PREFLIGHT_FAILED,
    INVALID_MANIFEST,
    NO_CHECKPOINT,
    DISABLED,
    LAUNCH_FAILED,
    PROBE_REQUIRED,
    CHECKPOINT_MISMATCH,
    ALREADY_FINISHED,
    CLUSTER_UNREACHABLE,
)
"""Every refusal: the clients' reason by code is generated from it (``arena_ls.wording_gen``)."""


class ArenaError(Exception):
    """A refusal: a contract error code, its reason, a message and extra data."""

    def __init__(self, kind: tuple[int, str], message: str, **data: Any) -> None:
        super().__init__(message)
        self.code, self.reason = kind
        self.message = message
        self.data: dict[str, Any] = {"reason": self.reason, **data}


class InvalidParams(ValueError):
    """Bad params: becomes JSON-RPC -32602 with a message naming the field."""
