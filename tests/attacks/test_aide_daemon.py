"""The AIDE daemon's trust boundary (issue 39, items 1 and 2), attacked for real.

A real demo daemon (``node editor-client/aide/demo/daemon.mjs``) over a real
``arena-ls`` owns a live run; the attacks are real HTTP requests:

- another local account (uid 4242, a child started with ``user=``; CI runs as
  root, elsewhere the test is skipped) tries to stop, start over, read the
  logs and status, and fetch the page that carries the secret;
- the owner's own account without the page's secret, with any ``Origin``
  (none, the page's, a foreign one, ``null``), and an ``<img>``-style GET;
- 3,000 log requests for made-up and malformed run ids.

Each asserts what the daemon did (status codes, the run still alive with the
same id, the follower count the daemon reports on ``/health``), never a time.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.lsp import REPO, WAIT, job, make_workspace
from tests.helpers.processes import kill_runs_of

AIDE = REPO / "editor-client" / "aide"
ARENA_LS = Path(sys.executable).with_name("arena-ls")
NODE = shutil.which("node")
OTHER_UID = 4242
SETTINGS = {
    "preflight": {"minFreeRamMb": 0, "requirePluggedIn": False, "minFreeDiskMb": 0, "gpuContention": "off"},
    "watchdog": {"stallSeconds": 600},
}

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="the peer check and these clients are POSIX"),
    pytest.mark.skipif(NODE is None, reason="node is not installed: the AIDE daemon cannot run"),
    pytest.mark.skipif(
        not (AIDE / "node_modules" / "vscode-languageserver-protocol").is_dir(),
        reason="editor-client/aide/node_modules is missing: run `npm ci` there (scripts/test.sh does)",
    ),
]


@dataclass
class Daemon:
    process: subprocess.Popen[str]
    port: int
    ui_port: int
    token: str
    token_file: Path
    workspace: Path

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = None,
        origin: str | None = None,
        port: int | None = None,
    ) -> tuple[int, Any]:
        """One request as the owner's account; ``token`` is sent only when given."""
        headers = _headers(body, token, origin)
        connection = http.client.HTTPConnection("127.0.0.1", port or self.port, timeout=WAIT)
        try:
            connection.request(method, path, body=_encoded(body), headers=headers)
            answer = connection.getresponse()
            return answer.status, _parsed(answer.read())
        finally:
            connection.close()

    def owner(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.call(method, path, body, token=self.token)

    def followers(self) -> int:
        status, health = self.call("GET", "/health")
        assert status == 200, health
        return int(health["arena"]["followers"])


def _headers(body: Any, token: str | None, origin: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token is not None:
        headers["X-Arena-Token"] = token
    if origin is not None:
        headers["Origin"] = origin
    return headers


def _encoded(body: Any) -> bytes | None:
    return None if body is None else json.dumps(body).encode()


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def _lines(stream: Any, into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line)


def _start_daemon(workspace: Path, token_file: Path) -> Daemon:
    assert NODE is not None
    process = subprocess.Popen(
        [
            NODE,
            str(AIDE / "demo" / "daemon.mjs"),
            "--workspace",
            str(workspace),
            "--port",
            "0",
            "--ui-port",
            "0",
            "--arena-ls",
            json.dumps([str(ARENA_LS)]),
            "--settings",
            json.dumps(SETTINGS),
            "--token-file",
            str(token_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        api, ui = _where_it_listens(process)
        return Daemon(process, api, ui, token_file.read_text().strip(), token_file, workspace)
    except BaseException:
        process.kill()  # never a daemon (and its arena-ls) left behind by a failed start
        process.wait()
        raise


def _where_it_listens(process: subprocess.Popen[str]) -> tuple[int, int]:
    """The API's and the page's ports, from what the daemon prints once both listen."""
    said: queue.Queue[str] = queue.Queue()
    for stream in (process.stdout, process.stderr):
        threading.Thread(target=_lines, args=(stream, said), daemon=True).start()
    api = ui = None
    seen: list[str] = []
    while api is None or ui is None:
        try:
            line = said.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"the daemon did not say where it listens: {seen[-10:]}") from None
        seen.append(line)
        found = re.match(r"(listening on|page:) http://127\.0\.0\.1:(\d+)", line)
        if found and found[1] == "page:":
            ui = int(found[2])
        elif found:
            api = int(found[2])
    return api, ui


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("aide-daemon")
    workspace = make_workspace(
        root / "ws",
        [job("long", "--steps", "100000", "--interval", "0.05", "--ckpt-every", "5", kind="train")],
    )
    started = _start_daemon(workspace, root / "state" / "aide-token")
    try:
        yield started
    finally:
        started.owner("POST", "/api/training/stop", {"kill": True, "confirm": True})
        started.process.terminate()
        try:
            started.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            started.process.kill()
            started.process.wait()
        kill_runs_of(workspace)


@pytest.fixture(scope="module")
def live_run(daemon: Daemon) -> str:
    """The owner's run of ``long``, started with the page's secret; its run id."""
    status, answer = daemon.owner("POST", "/api/training/start", {"id": "long", "approved": True})
    assert status == 200, answer
    return str(answer["runId"])


def _still_running(daemon: Daemon, run_id: str) -> None:
    status, answer = daemon.owner("GET", "/api/training/status")
    assert status == 200, answer
    active = answer["active"]
    assert active is not None and active["runId"] == run_id, f"the owner's run is gone or replaced: {active}"
    assert active["status"] in {"starting", "running"}, active


def _as_other_user(action: Callable[[], str]) -> str:
    """``action()`` run in a forked child that has become uid/gid 4242 (no groups); what it returned."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to the other account, act, report, and leave without cleanup
        outcome = "child failed"
        try:
            os.close(reader)
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            outcome = action()
        except BaseException as error:  # everything is reported to the parent
            outcome = f"child failed: {error!r}"
        finally:
            os.write(writer, outcome.encode())
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    assert not said.startswith("child failed"), said
    return said


def _other_user_calls(port: int, method: str, path: str, body: Any = None, token: str | None = None) -> int:
    def call() -> str:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
        connection.request(method, path, body=_encoded(body), headers=_headers(body, token, None))
        return str(connection.getresponse().status)

    return int(_as_other_user(call))


def _other_user_reads(path: Path) -> str:
    def read() -> str:
        try:
            return path.read_text()
        except OSError as error:
            return f"refused: {type(error).__name__}"

    return _as_other_user(read)


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to run a client as another account (uid 4242); CI runs as root"
)
def test_another_account_cannot_stop_start_or_read_even_with_the_secret(
    daemon: Daemon, live_run: str
) -> None:
    # The secret is the owner's: its file is 0600, so the other account cannot read it.
    assert daemon.token_file.stat().st_mode & 0o777 == 0o600
    assert _other_user_reads(daemon.token_file).startswith("refused:")
    # Nor fetch the page that carries it.
    assert _other_user_calls(daemon.ui_port, "GET", "/") == 403
    # And with or without it (say it leaked), every route refuses that account outright.
    for token in (None, daemon.token):
        attempts = [
            ("POST", "/api/training/stop", {"kill": True, "confirm": True}),
            ("POST", "/api/training/start", {"id": "long", "approved": True, "fresh": True}),
            ("GET", f"/api/training/logs?format=json&runId={live_run}", None),
            ("GET", f"/api/training/logs?runId={live_run}", None),
            ("GET", "/api/training/status", None),
            ("GET", "/api/training/fixes?id=long", None),
            ("POST", "/api/training/fix", {"id": "long", "title": "Add arena-ls's callback"}),
            ("GET", "/health", None),
        ]
        for method, path, body in attempts:
            assert _other_user_calls(daemon.port, method, path, body, token) == 403, (method, path, token)
    _still_running(daemon, live_run)


def test_requests_without_the_secret_are_403_whatever_their_origin(daemon: Daemon, live_run: str) -> None:
    page = f"http://127.0.0.1:{daemon.ui_port}"
    attempts: list[tuple[str, str, Any]] = [
        ("POST", "/api/training/stop", {"kill": True, "confirm": True}),
        ("POST", "/api/training/start", {"id": "long", "approved": True, "fresh": True}),
        ("GET", f"/api/training/logs?format=json&runId={live_run}", None),
        ("GET", "/api/training/status", None),
        ("GET", "/api/training/fixes?id=long", None),
        ("POST", "/api/training/fix", {"id": "long", "title": "Add arena-ls's callback"}),
    ]
    for origin in (None, page, "http://evil.example", "null", "http://127.0.0.2:8000"):
        for token in (None, "", "not-the-secret", daemon.token[:-1]):
            for method, path, body in attempts:
                status, _ = daemon.call(method, path, body, token=token, origin=origin)
                assert status == 403, (method, path, origin, token)
    _still_running(daemon, live_run)
    # The owner's page, with its secret, is served.
    status, answer = daemon.call("GET", "/api/training/status", token=daemon.token, origin=page)
    assert status == 200 and answer["active"]["runId"] == live_run


def test_an_img_style_get_is_refused_and_follows_nothing(daemon: Daemon, live_run: str) -> None:
    """An <img src> carries no Origin and no secret: the log route is refused before any follower is made."""
    before = daemon.followers()
    for index in range(30):
        bogus = f"long-20260101T000000-{index:06x}"
        for run_id in (live_run, bogus, ".."):
            status, _ = daemon.call("GET", f"/api/training/logs?runId={run_id}")
            assert status == 403, run_id
    assert daemon.followers() <= before


def test_three_thousand_bogus_run_ids_leave_no_followers(daemon: Daemon, live_run: str) -> None:
    """Even with the secret: an unknown or malformed run id is 404 and nothing is followed for it."""
    before = daemon.followers()
    malformed = ["..", ".", "-", "_", "CON", "con", "NUL", "../../etc/passwd", "long", "x" * 300]
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=WAIT)
    statuses: dict[int, int] = {}
    try:
        for index in range(3000):
            shaped = f"long-20260101T{index:06d}-{index:06x}"
            run_id = malformed[index % len(malformed)] if index % 3 == 0 else shaped
            fmt = "&format=json" if index % 2 == 0 else ""
            connection.request(
                "GET", f"/api/training/logs?runId={run_id}{fmt}", headers={"X-Arena-Token": daemon.token}
            )
            answer = connection.getresponse()
            answer.read()
            statuses[answer.status] = statuses.get(answer.status, 0) + 1
    finally:
        connection.close()
    assert statuses == {404: 3000}, statuses
    assert daemon.followers() <= max(before, 1), "a made-up run id got a follower"
    _still_running(daemon, live_run)
    # The live run's own log is followed by one shared follower, however many read it.
    for _ in range(20):
        status, page = daemon.owner("GET", f"/api/training/logs?format=json&runId={live_run}&limit=5")
        assert status == 200 and page["runId"] == live_run
    assert daemon.followers() <= max(before, 1)


def test_the_page_carries_the_secret_to_its_own_origin_only(daemon: Daemon) -> None:
    """The page's HTML holds the secret: no CORS header, no framing, and only for this loopback Host."""
    connection = http.client.HTTPConnection("127.0.0.1", daemon.ui_port, timeout=WAIT)
    try:
        connection.request("GET", "/", headers={"Origin": "http://evil.example"})
        answer = connection.getresponse()
        html = answer.read().decode()
        headers = {name.lower(): value for name, value in answer.getheaders()}
    finally:
        connection.close()
    assert answer.status == 200
    assert f'data-token="{daemon.token}"' in html
    assert "access-control-allow-origin" not in headers, "another origin could read the secret"
    assert headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    # DNS rebinding: a page of evil.example resolved to 127.0.0.1 would be same-origin with this one.
    for host in ("evil.example", f"evil.example:{daemon.ui_port}", f"127.0.0.1:{daemon.ui_port + 1}"):
        rebound = http.client.HTTPConnection("127.0.0.1", daemon.ui_port, timeout=WAIT)
        try:
            rebound.putrequest("GET", "/", skip_host=True)
            rebound.putheader("Host", host)
            rebound.endheaders()
            refused = rebound.getresponse()
            assert refused.status == 403, host
            assert daemon.token not in refused.read().decode()
        finally:
            rebound.close()
