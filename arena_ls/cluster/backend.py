"""The Ray back end: a run is a job on a Ray cluster, followed by a detached process on this machine.

The server spawns ``python -m arena_ls.cluster.agent RUN_DIR`` detached; that
agent submits the job through Ray's Jobs REST API and keeps the run folder
current from Ray's status and log (``arena_ls.cluster.agent``). The job runs
on the cluster, not here: when the agent dies (the laptop closes), the
job goes on, so the run is *revivable*: a new agent (``--adopt``) picks it
up by its recorded submission id and catches up its log. Nothing of the
trainer runs on this machine, so there is nothing here to kill or to count.

It takes every job with ``runOn`` (Ray is the one cluster kind), and plans
its start: the cluster's interpreter for ``{python}``, the cluster's part of
the spec, and the ``cluster`` pre-flight check in place of this machine's
``power``, ``ram``, ``gpu-contention`` and ``disk`` (``cluster.preflight``).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
from pathlib import Path

from arena_ls import platform
from arena_ls.cluster.config import ClusterTarget, read_token, resolve_cluster
from arena_ls.cluster.jobsapi import ClusterError, JobsClient
from arena_ls.cluster.preflight import LOCAL_ONLY_CHECKS, check_cluster
from arena_ls.errors import CLUSTER_UNREACHABLE, ArenaError
from arena_ls.lifecycle.backends.base import AgentProcess, RunPlan, detached_agent_alive
from arena_ls.lifecycle.rundir import ClusterSpec, RunDir, RunSpec, RunState
from arena_ls.manifest import Job, ManifestResult
from arena_ls.settings import Settings

log = logging.getLogger(__name__)

RAY = "ray"
"""What ``spec.json`` records as a cluster run's ``backend``."""
FOLLOWER_MODULE = "arena_ls.cluster.agent"
STOP_TIMEOUT = 10.0


class RayBackend:
    """``RunBackend`` for jobs with ``runOn`` naming a Ray cluster."""

    @property
    def name(self) -> str:
        return RAY

    def takes(self, job: Job) -> bool:
        return job.run_on is not None

    def plan(self, job: Job, manifest: ManifestResult, settings: Settings) -> RunPlan:
        """The cluster ``job`` names, as the manifest declares it with the user's settings over it."""
        target = resolve_cluster(job, manifest.clusters, settings)
        assert target is not None, "planned a job this back end does not take"
        resources = job.resources.to_dict()
        return RunPlan(
            python=target.python,
            runs_here=False,
            cluster=_cluster_spec(target, resources),
            replaces_checks=LOCAL_ONLY_CHECKS,
            own_check=functools.partial(check_cluster, target, resources),
        )

    def start(self, run_dir: RunDir, workspace: Path) -> AgentProcess:
        return self._spawn(run_dir, workspace)

    def start_failed(self, exit_code: int) -> bool:
        return exit_code != 0

    def start_again(self, run_dir: RunDir, workspace: Path, failed: AgentProcess) -> AgentProcess | None:
        return None  # the agent may have submitted the job already

    def prepare(self, workspace: Path) -> None:
        return None  # a cluster submission is an HTTP request: nothing to load ahead

    def release(self) -> None:
        return None

    def agent_alive(self, state: RunState | None, process: AgentProcess | None) -> bool:
        return detached_agent_alive(state, process)

    @property
    def revivable(self) -> bool:
        return True

    def revive(self, run_dir: RunDir, state: RunState) -> AgentProcess | None:
        """A new agent in adopt mode: it goes on from the recorded submission and ``output.log``."""
        if state.cluster is None:
            return None  # never submitted and never recorded: nothing on the cluster to follow
        try:
            return self._spawn(run_dir, run_dir.path, "--adopt")
        except OSError:
            return None

    def end_remains(self, run_dir: RunDir, state: RunState) -> str | None:
        """The run is lost: ask its cluster to stop its job, so that none runs on unfollowed.

        Best effort, in a thread (an HTTP request must not hold up the server)."""
        record = state.cluster
        sid = record.submission_id if record is not None else None
        if record is None or sid is None:
            return None  # nothing was ever sent
        try:
            token_file = cluster.token_file if (cluster := run_dir.read_spec().cluster) else None
        except (OSError, ValueError):
            token_file = None
        thread = threading.Thread(
            target=_stop_job,
            args=(record.name, record.address, token_file, sid),
            name=f"stop {sid}",
            daemon=True,
        )
        thread.start()
        return f"asked cluster {record.name!r} to stop {sid}"

    def request_stop(self, run_dir: RunDir, *, kill: bool, grace_seconds: float | None, by: str) -> None:
        run_dir.request_stop(kill=kill, grace_seconds=grace_seconds, by=by)  # the agent asks Ray

    def stop_undelivered(self, spec: RunSpec, state: RunState | None) -> ArenaError | None:
        """The agent found the head unreachable when it asked Ray to stop the job:
        ``CLUSTER_UNREACHABLE``, naming the cluster (the agent keeps asking, and follows the
        run until the head answers or the run is ``lost``)."""
        record = state.cluster if state is not None else None
        undelivered = record.stop_undelivered if record is not None else None
        if undelivered is None:
            return None
        name = spec.cluster.name if spec.cluster is not None else "?"
        return ArenaError(
            CLUSTER_UNREACHABLE,
            f"cluster {name!r} could not be asked to stop run {spec.run_id} ({undelivered[:200]}); "
            "the job keeps running there: the stop is asked again until the cluster answers",
            cluster=name,
            runId=spec.run_id,
            evidence=undelivered[:300],
        )

    def trainer_started(self, state: RunState) -> bool:
        """Ray accepted the submission (the trainer has no pid here)."""
        return bool(state.pid) or (state.cluster is not None and state.cluster.accepted is not None)

    def local_pids(self, state: RunState) -> list[int]:
        return []

    @staticmethod
    def _spawn(run_dir: RunDir, cwd: Path, *extra: str) -> AgentProcess:
        return platform.spawn_detached(
            [sys.executable, "-m", FOLLOWER_MODULE, str(run_dir.path), *extra],
            cwd=cwd,
            log_file=run_dir.agent_log,
        )


def _cluster_spec(target: ClusterTarget, resources: dict[str, float]) -> ClusterSpec:
    """The cluster's part of a run's spec (the token is read from its file when used, never stored)."""
    return ClusterSpec(
        name=target.name,
        kind=target.kind,
        address=target.address or "",
        token_file=target.token_file,
        resources=resources,
    )


def _stop_job(name: str, address: str, token_file: str | None, sid: str) -> None:
    """Ask cluster ``name`` to stop submission ``sid`` (a lost run's job); failures are only logged."""
    try:
        JobsClient(name, address, read_token(name, token_file), STOP_TIMEOUT).stop(sid)
    except ClusterError as error:
        log.warning("could not ask cluster %s to stop %s: %s", name, sid, error)
