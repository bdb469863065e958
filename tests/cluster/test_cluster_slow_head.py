"""The ``cluster`` pre-flight check against a head that is slow or answers oddly (a fake head, no Ray).

A real ``arena-ls`` over stdio; the head is a tiny HTTP server in this
process. While a start waits on the head, the server answers other
requests; a node list it cannot read is a failed ``cluster`` check (1005),
never an internal error.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support import CLUSTER, cluster_job, cluster_workspace
from tests.helpers.lsp import start_server, stop_server, wait_for
from tests.helpers.serving import serve_in_thread

PREFLIGHT_FAILED = 1005
WAIT = 30.0


class FakeHead(http.server.ThreadingHTTPServer):
    """Answers ``GET /api/jobs/`` (held until ``release`` while ``hold``), ``GET /nodes`` with ``nodes``."""

    daemon_threads = True

    def __init__(self, nodes: Any, hold: bool) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.nodes = nodes
        self.hold = hold
        self.asked = threading.Event()
        self.release = threading.Event()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FakeHead

    def do_GET(self) -> None:
        head = self.server
        if self.path.startswith("/api/jobs/"):
            head.asked.set()
            if head.hold:
                head.release.wait(WAIT)
            self._answer([])
        elif self.path.startswith("/nodes"):
            self._answer(head.nodes)
        else:
            self.send_error(404)

    def _answer(self, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextlib.contextmanager
def fake_head(nodes: Any, *, hold: bool = False) -> Iterator[FakeHead]:
    head = FakeHead(nodes, hold)
    serve_in_thread(head)
    try:
        yield head
    finally:
        head.release.set()
        head.shutdown()
        head.server_close()


def settings(head: FakeHead) -> dict[str, Any]:
    return {"clusters": {CLUSTER: {"address": head.address, "python": sys.executable}}}


NULL_DATA = {"data": None}
ODD_RESOURCES = {"data": {"summary": [{"raylet": {"state": "ALIVE", "resourcesTotal": {"GPU": "lots"}}}]}}


async def test_the_server_answers_while_a_start_waits_on_a_slow_head(tmp_path: Path) -> None:
    root = cluster_workspace(tmp_path / "ws", [cluster_job("tiny", "--steps", "3")])
    with fake_head(NULL_DATA, hold=True) as head:
        client = await start_server(root, init_options=settings(head))
        try:
            order: list[str] = []
            starting = asyncio.ensure_future(client.call_error("arena/start", {"id": "tiny"}))
            starting.add_done_callback(lambda _: order.append("start"))
            await wait_for(head.asked.is_set, what="the start's request to the head")
            status = await client.call("arena/status", {})
            order.append("status")
            assert "runs" in status
            head.release.set()
            error = await asyncio.wait_for(starting, WAIT)
            assert order == ["status", "start"], "the status answer came while the start was pending"
            assert error.code == PREFLIGHT_FAILED, error
        finally:
            await stop_server(client)


@pytest.mark.parametrize("nodes", [NULL_DATA, ODD_RESOURCES], ids=["data null", "non-numeric resources"])
async def test_a_node_list_that_cannot_be_read_is_a_failed_cluster_check(tmp_path: Path, nodes: Any) -> None:
    root = cluster_workspace(tmp_path / "ws", [cluster_job("tiny", "--steps", "3", resources={"gpus": 1})])
    with fake_head(nodes) as head:
        client = await start_server(root, init_options=settings(head))
        try:
            for params in ({"id": "tiny"}, {"id": "tiny", "dryRun": True}):
                if params.get("dryRun"):
                    result = await client.call("arena/start", params)
                    checks = result["preflight"]
                else:
                    error = await client.call_error("arena/start", params)
                    assert error.code == PREFLIGHT_FAILED, error
                    checks = error.data["checks"]  # type: ignore[attr-defined]
                check = next(c for c in checks if c["name"] == "cluster")
                assert check["ok"] is False and "cannot be read" in check["message"], check
        finally:
            await stop_server(client)
