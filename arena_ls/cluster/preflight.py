"""The ``cluster`` pre-flight check: reachable, authenticated, the requested resources exist.

It replaces the local ``power``, ``ram``, ``gpu-contention`` and ``disk``
checks for a job with ``runOn`` (contract 6.2). The message names the
cluster and the setting to fix, never its address or token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from arena_ls.cluster.config import ClusterTarget
from arena_ls.cluster.health import node_totals
from arena_ls.cluster.jobsapi import ClusterError

CHECK_NAME = "cluster"
CHECK_TIMEOUT = 5.0
LOCAL_ONLY_CHECKS = frozenset({"power", "ram", "gpu-contention", "disk", "reboot-pending"})
"""Checks of this machine that mean nothing for a job that runs elsewhere (a restart of the laptop
does not stop a job on the cluster: the next server follows it again)."""
_RAY_RESOURCE = {"gpus": "GPU", "cpus": "CPU", "memoryMb": "memory"}


def check_cluster(target: ClusterTarget, resources: Mapping[str, float]) -> dict[str, Any]:
    """``{name: "cluster", ok, message}`` for a job about to be submitted to ``target``."""
    try:
        client = target.client(timeout=CHECK_TIMEOUT)
        client.list_jobs()  # answers only an authenticated client
        nodes = client.nodes()
        missing = missing_resources(nodes, resources)
        described = describe_nodes(nodes)
    except ClusterError as error:
        return _check(False, _advice(target.name, error))
    except (AttributeError, ValueError, TypeError) as error:  # an answer not shaped as Ray's
        what = type(error).__name__
        return _check(False, f"cluster {target.name!r} sent node details that cannot be read ({what})")
    if missing:
        return _check(False, f"cluster {target.name!r} has no node with {missing}")
    return _check(True, f"cluster {target.name!r}: {described}")


def missing_resources(nodes: list[dict[str, Any]], resources: Mapping[str, float]) -> str | None:
    """What no single node of the cluster has (an entrypoint runs on one node); None: all fit."""
    wanted = {
        ray: (resources[ours] * 1024 * 1024 if ours == "memoryMb" else resources[ours])
        for ours, ray in _RAY_RESOURCE.items()
        if resources.get(ours)
    }
    if not wanted:
        return None
    for node in nodes:
        have = node.get("resources") or {}
        if all(float(have.get(name, 0.0)) >= amount for name, amount in wanted.items()):
            return None
    return ", ".join(_describe(ours, resources[ours]) for ours in _RAY_RESOURCE if resources.get(ours))


def describe_nodes(nodes: list[dict[str, Any]]) -> str:
    """``2 nodes, 8 CPUs, 1 GPU`` (what ``arena/status`` and the check's message show)."""
    totals = node_totals(nodes)
    return f"{_plural(totals.nodes, 'node')}, {_plural(totals.cpus, 'CPU')}, {_plural(totals.gpus, 'GPU')}"


def _plural(count: float, noun: str) -> str:
    shown = f"{count:g}"
    return f"{shown} {noun}" if count == 1 else f"{shown} {noun}s"


def _describe(field: str, amount: float) -> str:
    if field == "memoryMb":
        return f"{amount:g} MB of memory"
    return _plural(amount, field[:-1].upper())


def _advice(name: str, error: ClusterError) -> str:
    if error.kind == "unauthenticated":
        return f"{error}: put the cluster's token in a file and name it in arena.clusters.{name}.tokenFile"
    if error.kind == "unreachable":
        return f"{error}: is the head running, and is arena.clusters.{name}.address right?"
    return str(error)


def _check(ok: bool, message: str) -> dict[str, Any]:
    return {"name": CHECK_NAME, "ok": ok, "message": message}
