"""``arena/status`` health shows each declared cluster's nodes and GPUs, read from the real head.

A head that is down, or one that accepts but never answers, is an error
entry naming only the cluster; the status request itself never waits on
any of them (its first answer has nothing sampled yet).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import RayHead, free_port
from tests.cluster.support import CLUSTER, cluster_job, cluster_workspace, options
from tests.helpers.lsp import poll_until, start_server, stop_server

GONE, MUTE = "gone", "mute"


@pytest.fixture
def mute_head() -> Iterator[str]:
    """An address that accepts connections (the kernel's backlog) and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def three_clusters(root: Path) -> Path:
    cluster_workspace(root, [cluster_job("tiny", "--steps", "3")])
    manifest = root / "training" / "manifest.json"
    document = json.loads(manifest.read_text())
    document["clusters"].update({GONE: {"kind": "ray"}, MUTE: {"kind": "ray"}})
    manifest.write_text(json.dumps(document, indent=2))
    return root


async def test_status_health_shows_the_clusters_nodes_and_errors_without_waiting(
    tmp_path: Path, ray_head: RayHead, mute_head: str
) -> None:
    root = three_clusters(tmp_path / "ws")
    down = f"http://127.0.0.1:{free_port()}"
    settings = options(ray_head)
    token = {"tokenFile": str(ray_head.token_file)}
    settings["clusters"].update({GONE: {"address": down, **token}, MUTE: {"address": mute_head, **token}})
    client = await start_server(root, init_options=settings)
    try:
        first = await client.call("arena/status", {})
        entries = {entry["name"]: entry for entry in first["health"]["clusters"]}
        assert list(entries) == sorted([CLUSTER, GONE, MUTE]), "by name"
        assert all(entry["at"] is None for entry in entries.values()), (
            "the request did not wait for a cluster"
        )

        shown: dict[str, dict[str, Any]] = {}

        async def all_sampled() -> bool:
            status = await client.call("arena/status", {})
            shown.update({entry["name"]: entry for entry in status["health"]["clusters"]})
            return all(entry["at"] is not None for entry in shown.values())

        await poll_until(all_sampled, "a sample of every cluster", timeout=60)
        lab = shown[CLUSTER]
        assert (lab["nodes"], lab["cpus"], lab["gpus"], lab["error"]) == (1, 2, 0, None), lab
        for name in (GONE, MUTE):
            entry = shown[name]
            assert entry["nodes"] is None and f"cluster {name!r} is not reachable" in entry["error"], entry
        text = json.dumps(shown)
        assert ray_head.address not in text and down not in text and mute_head not in text
        assert ray_head.token_file.read_text().strip() not in text
    finally:
        await stop_server(client)
