"""A stand-in for a Ray head's dashboard (the Jobs API), for tests that need no Ray.

It answers the two requests of the ``cluster`` pre-flight check and of a health
sample (``GET /api/jobs/``, ``GET /nodes?view=summary``: one alive node with two
CPUs), checking the bearer token when it is given one. Every other request, and
every request under ``/echo/``, gets a 500 whose page shows the request with
its headers, ``Authorization`` included, as a debugging proxy in front of a
head might. Each request is recorded.
"""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

from tests.helpers.serving import serve_in_thread

NODES = {"data": {"summary": [{"raylet": {"state": "ALIVE", "resourcesTotal": {"CPU": 2.0}}}]}}


@attrs.frozen
class Request:
    method: str
    path: str
    authorization: str | None


@attrs.define
class FakeDashboard:
    address: str
    """``http://127.0.0.1:PORT``."""
    token: str | None
    """The token it accepts; None: it accepts any request (no authentication)."""
    requests: list[Request] = attrs.field(factory=list)


def _handler(dashboard: FakeDashboard) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            authorization = self.headers.get("Authorization")
            dashboard.requests.append(Request(self.command, self.path, authorization))
            known = self.command == "GET" and self.path in ("/api/jobs/", "/nodes?view=summary")
            if not known:
                echo = "".join(f"{name}: {value}\n" for name, value in self.headers.items())
                self._send(500, f"{self.command} {self.path}\n{echo}", "text/plain")
            elif dashboard.token is not None and authorization != f"Bearer {dashboard.token}":
                self._send(401 if authorization is None else 403, "", "text/plain")
            else:
                self._send(200, "[]" if self.path == "/api/jobs/" else json.dumps(NODES), "application/json")

        def _send(self, code: int, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextmanager
def fake_dashboard(token: str | None) -> Iterator[FakeDashboard]:
    """A dashboard on a free loopback port, for the ``with`` block."""
    dashboard = FakeDashboard("", token)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(dashboard))
    server.daemon_threads = True
    dashboard.address = f"http://127.0.0.1:{server.server_address[1]}"
    serve_in_thread(server, "fake-dashboard")
    try:
        yield dashboard
    finally:
        server.shutdown()
        server.server_close()
