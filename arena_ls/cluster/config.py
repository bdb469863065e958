"""The cluster a job runs on: the manifest's declaration with the user's settings over it."""

from __future__ import annotations

from pathlib import Path

import attrs

from arena_ls.cluster.jobsapi import ClusterError, JobsClient
from arena_ls.manifest.model import ClusterDecl, Job
from arena_ls.settings import Settings

MAX_TOKEN_BYTES = 64 * 1024


@attrs.frozen
class ClusterTarget:
    """Everything needed to reach one cluster (the token is read from ``token_file`` when used)."""

    name: str
    kind: str
    address: str | None
    token_file: str | None
    python: tuple[str, ...]

    def client(self, timeout: float | None = None) -> JobsClient:
        """A client of this cluster; ``ClusterError`` when its address or token is missing."""
        if not self.address:
            raise ClusterError(
                "unreachable",
                f"cluster {self.name!r} has no address: set arena.clusters.{self.name}.address "
                "(or `address` in the manifest's `clusters`)",
            )
        token = read_token(self.name, self.token_file)
        if timeout is None:
            return JobsClient(self.name, self.address, token)
        return JobsClient(self.name, self.address, token, timeout)


def resolve_cluster(job: Job, clusters: dict[str, ClusterDecl], settings: Settings) -> ClusterTarget | None:
    """The cluster ``job`` runs on (None: this machine); settings override the manifest's address."""
    if job.run_on is None:
        return None
    return cluster_target(clusters.get(job.run_on) or ClusterDecl(name=job.run_on), settings)


def cluster_target(decl: ClusterDecl, settings: Settings) -> ClusterTarget:
    """The manifest's declaration of one cluster with the user's ``clusters.NAME`` settings over it."""
    own = settings.cluster(decl.name)
    return ClusterTarget(
        name=decl.name,
        kind=decl.kind,
        address=own.address or decl.address,
        token_file=own.token_file,
        python=own.python,
    )


def declared_targets(clusters: dict[str, ClusterDecl], settings: Settings) -> list[ClusterTarget]:
    """Every cluster the manifest declares, by name (what ``arena/status`` health samples)."""
    return [cluster_target(clusters[name], settings) for name in sorted(clusters)]


def read_token(name: str, token_file: str | None) -> str | None:
    """The token in ``token_file`` (stripped); None when no file is configured.

    The message of a failure names the setting, never the token."""
    if token_file is None:
        return None
    try:
        data = Path(token_file).expanduser().read_bytes()[:MAX_TOKEN_BYTES]
    except OSError as error:
        raise ClusterError(
            "unauthenticated",
            f"cannot read the token file of cluster {name!r} (arena.clusters.{name}.tokenFile): "
            f"{error.strerror or type(error).__name__}",
        ) from None
    token = data.decode("utf-8", "replace").strip()
    if not token:
        raise ClusterError(
            "unauthenticated",
            f"the token file of cluster {name!r} (arena.clusters.{name}.tokenFile) is empty",
        )
    return token
