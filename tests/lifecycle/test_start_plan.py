"""A start asks the back ends which one takes its job, and plans it once from one manifest snapshot.

Driven in-process through fake back ends (``tests/helpers/fake_backend.py``):
no process starts. The supervisor knows no ``runOn``: the back end that
takes a job says what ``{python}`` means, what of the spec is its own, and
which pre-flight checks it replaces with its own.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import attrs
import pytest

from arena_ls.diagnostics import Diag
from arena_ls.errors import APPROVAL_REQUIRED, LAUNCH_FAILED, PREFLIGHT_FAILED, PROBE_REQUIRED, ArenaError
from arena_ls.lifecycle.backends.base import Backends, Check, RunPlan
from arena_ls.lifecycle.starter import DryRun, StartRequest
from arena_ls.lifecycle.supervisor import Supervisor
from arena_ls.manifest import Job, ManifestResult
from arena_ls.manifest.cache import ManifestCache
from arena_ls.run.rundir import ClusterSpec, RunDir
from arena_ls.run.states import RunStatus
from arena_ls.settings import Settings
from tests.helpers.fake_backend import FakeBackend, Recorder, write_state
from tests.helpers.lsp import job, make_workspace

WAIT = 20.0
"""Every wait in this file ends at the event; this only bounds a broken one."""
CLUSTER_PYTHON = ("/opt/cluster/bin/python",)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(
        tmp_path / "ws",
        [
            job("quick", "--steps", "3"),
            job("lm", kind="train", probe={"args": ["fake_trainer.py", "--probe"]}),
            job("asks", status="approval-required"),
        ],
    )


class CountingCache(ManifestCache):
    """The supervisor's manifest cache, counting every time the manifest is asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asks = 0

    def get(
        self, path: Path, root: Path, state_dir: Path | None, *, revalidate: bool = False
    ) -> ManifestResult:
        self.asks += 1
        return super().get(path, root, state_dir, revalidate=revalidate)

    async def get_async(
        self, path: Path, root: Path, state_dir: Path | None, *, max_age: float | None = None
    ) -> ManifestResult:
        self.asks += 1
        return await super().get_async(path, root, state_dir, max_age=max_age)


@attrs.define
class ClusterLike(FakeBackend):
    """A back end that plans as a cluster does: its interpreter, its spec part, its own check."""

    own_ok: bool = True
    checked: int = 0

    def plan(self, job: Job, manifest: ManifestResult, settings: Settings) -> RunPlan:
        self.planned.append((job.id, manifest))
        return RunPlan(
            python=CLUSTER_PYTHON,
            runs_here=False,
            cluster=ClusterSpec(
                name="lab", kind="ray", address="http://127.0.0.1:9", resources={"gpus": 1.0}
            ),
            replaces_checks=frozenset({"disk", "ram"}),
            own_check=self._check,
        )

    def _check(self) -> Check:
        self.checked += 1
        return {"name": "cluster", "ok": self.own_ok, "message": "cluster 'lab': 1 node, 8 CPUs, 1 GPU"}


def local_preflight(job: Job, gates: list[Diag], ours: set[int]) -> tuple[list[Check], list[str]]:
    """This machine's pre-flight, as ``Preflight.run`` answers it."""
    return [
        {"name": "disk", "ok": False, "message": "1 MB free"},
        {"name": "ram", "ok": True, "message": "8 GB free"},
        {"name": "state-dir", "ok": True, "message": "writable"},
    ], ["the laptop runs on battery"]


def supervisor_with(root: Path, *backends: FakeBackend, preflight: Any = None) -> Supervisor:
    default, *others = backends
    return Supervisor(root, Settings, Recorder(), preflight=preflight, backends=Backends(default, *others))


async def started(supervisor: Supervisor, backend: FakeBackend, request: StartRequest) -> RunDir:
    """Start, play the agent that records the trainer, and return the run once the start answered."""
    starting = asyncio.create_task(supervisor.start(request))
    await asyncio.wait_for(backend.start_seen.wait(), WAIT)
    run = backend.started[-1]
    write_state(run, status=RunStatus.RUNNING, pid=12345)
    await asyncio.wait_for(starting, WAIT)
    return run


async def test_the_supervisor_asks_each_back_end_in_turn_and_starts_on_the_first_that_takes_the_job(
    workspace: Path,
) -> None:
    here = FakeBackend("here", accepts=lambda job: job.id != "quick")
    there = FakeBackend("there", python=("/opt/there/python",))
    never = FakeBackend("never")
    supervisor = supervisor_with(workspace, here, there, never)
    try:
        run = await started(supervisor, there, StartRequest(id="quick"))
        spec = run.read_spec()
        assert (here.asked, there.asked, never.asked) == (["quick"], ["quick"], []), "asked in turn"
        assert here.started == [] and spec.backend == "there"
        assert spec.argv[:2] == ["/opt/there/python", "fake_trainer.py"], "{python} is the back end's"
        assert [planned for planned, _ in there.planned] == ["quick"] and here.planned == []
    finally:
        await supervisor.close()


async def test_a_job_no_back_end_takes_is_refused_and_runs_nowhere(workspace: Path) -> None:
    """Never the default by elimination: a job meant for a cluster this server lacks must not run here."""
    here = FakeBackend("here", accepts=lambda job: False)
    supervisor = supervisor_with(workspace, here)
    try:
        with pytest.raises(ArenaError) as refused:
            await supervisor.start(StartRequest(id="quick"))
        assert refused.value.code == LAUNCH_FAILED[0]
        assert str(refused.value).endswith("no run back end of this server takes job 'quick'")
        assert here.started == [] and not any(supervisor.folder.runs_dir.iterdir()), "nothing is left"
        assert supervisor.runlock.holder() is None
    finally:
        await supervisor.close()


async def test_a_cluster_start_reads_the_manifest_once_and_plans_it_once(workspace: Path) -> None:
    cluster = ClusterLike("ray")
    supervisor = supervisor_with(workspace, cluster, preflight=local_preflight)
    counting = supervisor.manifests = CountingCache()
    try:
        run = await started(supervisor, cluster, StartRequest(id="quick"))
        assert counting.asks == 1, "one snapshot of the manifest for the whole start"
        assert len(cluster.planned) == 1 and cluster.checked == 1
        spec = run.read_spec()
        assert spec.argv[0] == CLUSTER_PYTHON[0] and spec.cluster is not None and spec.cluster.name == "lab"
        assert spec.exec_check is None and spec.power is None, "nothing of the trainer runs here"
        said = supervisor.listener.lifecycle_lines  # type: ignore[attr-defined]
        assert "warning: the laptop runs on battery" in said
    finally:
        await supervisor.close()


async def test_a_back_end_replaces_this_machines_checks_with_its_own_in_a_dry_run_and_a_refusal(
    workspace: Path,
) -> None:
    cluster = ClusterLike("ray", own_ok=False)
    supervisor = supervisor_with(workspace, cluster, preflight=local_preflight)
    try:
        preview = await supervisor.start(StartRequest(id="quick", dry_run=True))
        assert isinstance(preview, DryRun)
        assert [c["name"] for c in preview.checks] == ["cluster", "state-dir"], "disk and ram replaced"
        assert preview.argv[0] == CLUSTER_PYTHON[0]
        with pytest.raises(ArenaError) as refused:
            await supervisor.start(StartRequest(id="quick"))
        assert refused.value.code == PREFLIGHT_FAILED[0]
        assert str(refused.value) == "pre-flight failed: cluster: cluster 'lab': 1 node, 8 CPUs, 1 GPU"
        assert cluster.started == []
    finally:
        await supervisor.close()


async def test_a_probe_is_a_start_variant_told_to_its_caller_right_before_the_launch(workspace: Path) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, backend)
    told: list[tuple[str, int]] = []
    try:
        starting = asyncio.create_task(
            supervisor.start(
                StartRequest(id="lm", probe=True),
                launching=lambda job: told.append((job.id, len(backend.started))),
            )
        )
        await asyncio.wait_for(backend.start_seen.wait(), WAIT)
        write_state(backend.started[0], status=RunStatus.RUNNING, pid=12345)
        view = await asyncio.wait_for(starting, WAIT)
        spec = view.spec
        assert told == [("lm", 0)], "told the job itself, before its run started"
        assert (spec.job_id, spec.max_restarts, spec.resumed_from_step) == ("lm.probe", 0, None)
        assert spec.argv[1:] == ["fake_trainer.py", "--probe"], "the probe's args"
        assert backend.asked == ["lm.probe"]
    finally:
        await supervisor.close()


async def test_a_probe_is_refused_as_a_start_is_and_admit_refuses_before_anything_is_asked(
    workspace: Path,
) -> None:
    backend = FakeBackend()
    supervisor = supervisor_with(workspace, backend)

    def admit(job: Job) -> None:
        raise ArenaError(PROBE_REQUIRED, f"job {job.id!r} needs a passing VRAM probe first")

    try:
        with pytest.raises(ArenaError) as unapproved:
            await supervisor.start(StartRequest(id="asks", probe=True))
        assert unapproved.value.code == APPROVAL_REQUIRED[0]
        assert str(unapproved.value) == "job 'asks' needs approval: probe it with approved: true"
        with pytest.raises(ArenaError) as refused:
            await supervisor.start(StartRequest(id="quick"), admit=admit)
        assert refused.value.code == PROBE_REQUIRED[0] and "'quick'" in str(refused.value)
        assert backend.asked == ["asks.probe"] and backend.started == [], (
            "the refused start asked no back end"
        )
    finally:
        await supervisor.close()
