"""What ``arena/status`` health says of each cluster the manifest declares: nodes, CPUs, GPUs.

A cluster is read over the network, so a status request never does it: it
answers the last sample at once, and a sample missing or older than
:data:`MAX_AGE_S` is taken again on a daemon thread (one per cluster at a
time, so a black-holed head delays nothing but its own entry). An entry
names the cluster only; its error says what failed, never the address or
the token (the REST client's messages are written that way).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

import attrs

from arena_ls.cluster.config import ClusterTarget
from arena_ls.cluster.jobsapi import ClusterError

MAX_AGE_S = 5.0
"""Seconds a cluster's sample is shown before a status request has it taken again."""
SAMPLE_TIMEOUT_S = 5.0
"""Seconds one request to a cluster may take while sampling."""
ACCELERATOR_PREFIX = "accelerator_type:"
"""Ray's resource naming a node's GPU model (``accelerator_type:A100``)."""


@attrs.frozen
class NodeTotals:
    """Alive nodes and the CPUs and GPUs they have, summed."""

    nodes: int
    cpus: float
    gpus: float
    gpu_names: tuple[str, ...] = ()


def node_totals(nodes: Iterable[Mapping[str, Any]]) -> NodeTotals:
    """Sums of :meth:`JobsClient.nodes`; GPU names from Ray's ``accelerator_type:`` resources."""
    listed = list(nodes)
    resources = [node.get("resources") or {} for node in listed]
    names = sorted(
        {
            key[len(ACCELERATOR_PREFIX) :]
            for have in resources
            for key in have
            if key.startswith(ACCELERATOR_PREFIX)
        }
    )
    return NodeTotals(
        nodes=len(listed),
        cpus=sum(float(have.get("CPU", 0.0)) for have in resources),
        gpus=sum(float(have.get("GPU", 0.0)) for have in resources),
        gpu_names=tuple(names),
    )


@attrs.frozen
class ClusterHealth:
    """One cluster's sample: its totals, or why it could not be read. ``at`` None: not sampled yet."""

    name: str
    totals: NodeTotals | None = None
    error: str | None = None
    at: float | None = None
    """``time.time()`` of the sample."""

    def to_wire(self) -> dict[str, Any]:
        totals = self.totals
        return {
            "name": self.name,
            "nodes": totals.nodes if totals else None,
            "cpus": _number(totals.cpus) if totals else None,
            "gpus": _number(totals.gpus) if totals else None,
            "gpuNames": list(totals.gpu_names) if totals else [],
            "error": self.error,
            "at": _iso(self.at),
        }


def sample_cluster(target: ClusterTarget, clock: Callable[[], float] = time.time) -> ClusterHealth:
    """Read ``target``'s nodes now (blocking: a worker thread's job)."""
    try:
        client = target.client(timeout=SAMPLE_TIMEOUT_S)
        client.list_jobs()  # answers only an authenticated client, as the pre-flight check
        totals = node_totals(client.nodes())
    except ClusterError as error:
        return ClusterHealth(target.name, error=str(error), at=clock())
    return ClusterHealth(target.name, totals=totals, at=clock())


class ClusterHealthSampler:
    """The latest sample of each cluster, refreshed off the caller's thread when stale."""

    def __init__(
        self,
        sample: Callable[[ClusterTarget], ClusterHealth] = sample_cluster,
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sample = sample
        self._max_age_s = max_age_s
        self._clock = clock
        self._lock = threading.Lock()
        self._latest: dict[ClusterTarget, ClusterHealth] = {}
        self._in_flight: set[ClusterTarget] = set()

    def latest(self, targets: Iterable[ClusterTarget]) -> list[ClusterHealth]:
        """One entry per target, at once; stale or missing ones are sampled in the background.

        A target is keyed by its whole configuration, so a changed address or
        token file is sampled afresh rather than shown with the old answer.
        """
        wanted = list(targets)
        shown: list[ClusterHealth] = []
        with self._lock:
            self._latest = {t: h for t, h in self._latest.items() if t in wanted}
            for target in wanted:
                health = self._latest.get(target) or ClusterHealth(target.name)
                shown.append(health)
                if self._is_stale(health) and target not in self._in_flight:
                    self._in_flight.add(target)
                    threading.Thread(
                        target=self._refresh, args=(target,), name="arena-cluster-health", daemon=True
                    ).start()
        return shown

    def _is_stale(self, health: ClusterHealth) -> bool:
        return health.at is None or self._clock() - health.at > self._max_age_s

    def _refresh(self, target: ClusterTarget) -> None:
        try:
            health = self._sample(target)
        except Exception as error:  # a bug here must not end the thread silently or the server
            health = ClusterHealth(
                target.name,
                error=f"cluster {target.name!r} could not be read ({type(error).__name__})",
                at=self._clock(),
            )
        with self._lock:
            self._latest[target] = health
            self._in_flight.discard(target)


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value


def _iso(at: float | None) -> str | None:
    if at is None:
        return None
    stamp = datetime.fromtimestamp(at, timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
