"""The clusters in ``arena/status`` health: sums of Ray's nodes, sampled off the request's thread.

The dashboard is the stand-in of ``test_cluster_units``; a held variant of it
shows that a status request answers while the cluster has not.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console

from arena_ls.client.tables import cluster_text, health_table
from arena_ls.cluster import health as health_module
from arena_ls.cluster.config import ClusterTarget, declared_targets
from arena_ls.cluster.health import ClusterHealth, ClusterHealthSampler, node_totals
from arena_ls.manifest.model import ClusterDecl
from arena_ls.settings import parse_settings
from tests.helpers.serving import serve_in_thread
from tests.helpers.waiting import wait_until
from tests.unit.test_cluster_units import _Dashboard

DEADLINE_S = 30.0


class _HeldDashboard(_Dashboard):
    """Answers only once the test sets ``release``; ``paths`` records every request, as it arrives."""

    release = threading.Event()
    paths: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.paths.append(self.path)
        self.release.wait(DEADLINE_S)
        super().do_GET()


def _serve(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    serve_in_thread(server)
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def dashboard() -> Iterator[str]:
    yield from _serve(_Dashboard)


@pytest.fixture
def held_dashboard() -> Iterator[str]:
    _HeldDashboard.release = threading.Event()
    _HeldDashboard.paths = []
    try:
        yield from _serve(_HeldDashboard)
    finally:
        _HeldDashboard.release.set()


def target(address: str, token_file: Path | None) -> ClusterTarget:
    return ClusterTarget("lab", "ray", address, str(token_file) if token_file else None, ("python",))


def token(tmp_path: Path, text: str = "right") -> Path:
    path = tmp_path / f"token-{text}"
    path.write_text(text + "\n")
    return path


def sampled(sampler: ClusterHealthSampler, targets: list[ClusterTarget]) -> list[ClusterHealth]:
    """Ask until every entry carries a sample (a deadline, never a guess of how long it takes)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        shown = sampler.latest(targets)
        if all(health.at is not None for health in shown):
            return shown
        threading.Event().wait(0.02)
    raise AssertionError(f"no sample within {DEADLINE_S} s: {sampler.latest(targets)}")


def test_totals_sum_alive_nodes_and_name_the_gpu_models() -> None:
    nodes = [
        {"resources": {"CPU": 8.0, "GPU": 2.0, "accelerator_type:A100": 1.0}},
        {"resources": {"CPU": 4.0, "GPU": 1.0, "accelerator_type:T4": 1.0}},
        {"resources": {"CPU": 2.0}},
    ]
    totals = node_totals(nodes)
    assert (totals.nodes, totals.cpus, totals.gpus, totals.gpu_names) == (3, 14.0, 3.0, ("A100", "T4"))
    wire = ClusterHealth("lab", totals, at=0.0).to_wire()
    assert wire == {
        "name": "lab", "nodes": 3, "cpus": 14, "gpus": 3, "gpuNames": ["A100", "T4"],
        "error": None, "at": "1970-01-01T00:00:00.000Z",
    }  # fmt: skip
    assert ClusterHealth("lab").to_wire()["at"] is None


def test_a_status_answers_while_the_cluster_has_not(held_dashboard: str, tmp_path: Path) -> None:
    sampler = ClusterHealthSampler()
    lab = target(held_dashboard, token(tmp_path))
    first = sampler.latest([lab])
    assert first == [ClusterHealth("lab")], "nothing sampled yet, and the call did not wait for the cluster"
    _HeldDashboard.release.set()
    (health,) = sampled(sampler, [lab])
    assert health.error is None and health.totals is not None
    assert (health.totals.nodes, health.totals.cpus, health.totals.gpus) == (1, 2.0, 0.0), (
        "the dead node is left out"
    )


def test_a_cluster_is_sampled_once_at_a_time_and_a_held_one_delays_no_other(
    held_dashboard: str, dashboard: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/protocol.md: a sample is taken "one per cluster at a time". While ``lab``'s sample
    hangs on its head, status requests keep asking (every one of them finds it missing) and
    only one request reaches that head; another cluster is sampled meanwhile."""
    monkeypatch.setattr(health_module, "SAMPLE_TIMEOUT_S", 2 * DEADLINE_S)  # held until released
    sampler = ClusterHealthSampler(max_age_s=3600.0)
    right = token(tmp_path)
    lab = target(held_dashboard, right)
    other = ClusterTarget("other", "ray", dashboard, str(right), ("python",))
    sampler.latest([lab, other])
    wait_until(lambda: _HeldDashboard.paths, "the first request of lab's sample", DEADLINE_S)
    for _ in range(20):
        assert sampler.latest([lab, other])[0] == ClusterHealth("lab"), "lab's sample is still in flight"

    def other_sampled() -> ClusterHealth | None:
        health = sampler.latest([lab, other])[1]
        return health if health.at is not None else None

    other_health = wait_until(other_sampled, "other's sample while lab's hangs", DEADLINE_S)
    assert other_health is not None and other_health.error is None
    assert _HeldDashboard.paths == ["/api/jobs/"], _HeldDashboard.paths
    _HeldDashboard.release.set()
    (lab_health, _) = sampled(sampler, [lab, other])
    assert lab_health.error is None
    for thread in threading.enumerate():  # every sample this sampler started is over: the count is final
        if thread.name == "arena-cluster-health":
            thread.join(DEADLINE_S)
            assert not thread.is_alive(), "a sample thread still hangs"
    assert _HeldDashboard.paths == ["/api/jobs/", "/nodes?view=summary"], (
        f"one sample of lab (its two requests), not one per status request: {_HeldDashboard.paths}"
    )


@pytest.mark.parametrize(
    ("token_text", "address", "expected"),
    [
        ("wrong", None, "the token was refused"),
        (None, None, "no token was sent"),
        ("right", "down", "not reachable"),
    ],
)
def test_a_cluster_that_cannot_be_read_is_an_error_entry_without_address_or_token(
    dashboard: str, tmp_path: Path, token_text: str | None, address: str | None, expected: str
) -> None:
    if address == "down":
        closed = http.server.HTTPServer(("127.0.0.1", 0), _Dashboard)
        address = f"127.0.0.1:{closed.server_address[1]}"
        closed.server_close()
    address = address or dashboard
    lab = target(address, token(tmp_path, token_text) if token_text else None)
    (health,) = sampled(ClusterHealthSampler(), [lab])
    assert health.totals is None and health.error is not None
    assert expected in health.error and "'lab'" in health.error
    assert address not in health.error and "wrong" not in health.error.replace("'lab'", "")
    assert health.to_wire()["nodes"] is None


def test_a_stale_sample_is_taken_again_and_a_cluster_no_longer_declared_is_dropped(tmp_path: Path) -> None:
    now = [1000.0]
    calls: list[str] = []

    def sample(lab: ClusterTarget) -> ClusterHealth:
        calls.append(lab.name)
        return ClusterHealth(lab.name, error=f"sample {len(calls)}", at=now[0])

    sampler = ClusterHealthSampler(sample, max_age_s=5.0, clock=lambda: now[0])
    lab, other = target("h:1", None), ClusterTarget("other", "ray", "h:2", None, ("python",))
    assert [h.error for h in sampled(sampler, [lab])] == ["sample 1"]
    assert [h.error for h in sampler.latest([lab])] == ["sample 1"] and calls == ["lab"], (
        "fresh: not sampled again"
    )
    now[0] += 6.0
    sampler.latest([lab])  # stale: answered from the old sample, sampled again behind it
    _wait_for(lambda: sampler.latest([lab])[0].error == "sample 2")
    assert [h.name for h in sampled(sampler, [other])] == ["other"], "only what is declared now"
    assert calls == ["lab", "lab", "other"]


def test_a_failing_sample_becomes_an_error_entry() -> None:
    def broken(lab: ClusterTarget) -> ClusterHealth:
        raise RuntimeError("bug")

    (health,) = sampled(ClusterHealthSampler(broken), [target("h:1", None)])
    assert health.error == "cluster 'lab' could not be read (RuntimeError)"


def test_declared_clusters_take_the_users_address_and_token_file() -> None:
    settings, _ = parse_settings({"clusters": {"lab": {"address": "mine:8265", "tokenFile": "/t"}}})
    clusters = {"lab": ClusterDecl("lab", address="theirs:8265"), "cold": ClusterDecl("cold", address="c:1")}
    targets = declared_targets(clusters, settings)
    assert [(t.name, t.address, t.token_file) for t in targets] == [
        ("cold", "c:1", None), ("lab", "mine:8265", "/t"),
    ]  # fmt: skip


def test_the_status_table_has_one_line_per_cluster() -> None:
    up = {"name": "lab", "nodes": 2, "cpus": 16, "gpus": 1, "gpuNames": ["A100"], "error": None, "at": "x"}
    down = {"name": "cold", "nodes": None, "cpus": None, "gpus": None, "gpuNames": [], "error": "no answer"}
    fresh = {"name": "new", "nodes": None, "error": None, "at": None}
    assert cluster_text(up) == "2 nodes, 16 CPUs, 1 GPU (A100)"
    assert cluster_text(down) == "error: no answer"
    assert cluster_text(fresh) == "not sampled yet"
    console = Console(width=200, record=True)
    console.print(health_table({"clusters": [up, down]}, None))
    text = console.export_text()
    assert "cluster lab" in text and "2 nodes, 16 CPUs, 1 GPU (A100)" in text
    assert "cluster cold" in text and "error: no answer" in text


def _wait_for(condition: Callable[[], Any]) -> None:
    wait_until(condition, "the condition", DEADLINE_S)
