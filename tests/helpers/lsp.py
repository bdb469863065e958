"""Driving a real ``arena-ls`` over stdio from tests, and waiting for what it sends.

Tests never sleep for an event: they wait for it with a deadline (``wait_for``),
which polls a condition, so they pass on a loaded two-core machine too.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
    default_converter,
)
from pytest_lsp import client_capabilities
from pytest_lsp.client import LanguageClient, register_lsp_features

from arena_ls import loopcheck
from arena_ls.agent import launch

REPO = Path(__file__).resolve().parents[2]
FAKE_TRAINER = REPO / "tests" / "fixtures" / "trainers" / "fake_trainer.py"
WAIT = 60.0
"""Default deadline for an awaited event: generous, since CI machines are loaded."""

RESUME = {"args": ["--resume", "--start-step", "{step}"]}
ANSWERS_AN_OBJECT = frozenset(
    {"arena/start", "arena/stop", "arena/status", "arena/runs", "arena/logs", "arena/metrics"}
)
"""Methods whose answer is always an object (contract): a null is a defect of the wire."""
RECENT_KEPT = 40


def _raw_converter() -> Any:
    """Keep custom results and notification params as plain dicts on the client side."""
    converter = default_converter()

    def keep(obj: Any, cls: type) -> Any:
        return cls(**obj)

    for cls in (JsonRPCResponseMessage, JsonRPCNotification, JsonRPCRequestMessage):
        converter.register_structure_hook(cls, keep)
    return converter


class ArenaClient(LanguageClient):
    """A pytest-lsp client that records arena's custom notifications."""

    def __init__(self) -> None:
        super().__init__(converter_factory=_raw_converter)
        register_lsp_features(self)
        self.statuses: list[dict[str, Any]] = []
        self.log_lines: list[dict[str, Any]] = []
        self.log_batches: list[dict[str, Any]] = []
        self.lens_refreshes = 0
        self.slow_callback_log: Path | None = None
        self.recent: collections.deque[str] = collections.deque(maxlen=RECENT_KEPT)
        """The last messages read from the server, shortened (the evidence of a null answer)."""
        handle = self.protocol.handle_message

        def recorded(message: Any) -> Any:
            self.recent.append(repr(message)[:400])
            return handle(message)

        self.protocol.handle_message = recorded  # type: ignore[method-assign]
        """Where the server reports a callback that held its event loop (``check_slow_callbacks``)."""

        @self.feature("arena/statusChanged")
        def _status(client: ArenaClient, params: Any) -> None:
            client.statuses.append(params)

        @self.feature("workspace/codeLens/refresh")
        def _refresh(client: ArenaClient, params: Any) -> None:
            client.lens_refreshes += 1

        @self.feature("arena/log")
        def _log(client: ArenaClient, params: Any) -> None:
            client.log_batches.append(params)
            client.log_lines.extend(params["lines"])

    async def call(self, method: str, params: Any = None) -> Any:
        result = await asyncio.wait_for(self.protocol.send_request_async(method, params), WAIT)
        if result is None and method in ANSWERS_AN_OBJECT:
            # Seen once in 120 runs of a framework e2e (arena/start answered null while the run
            # started): the messages around it are the evidence the next time.
            raise AssertionError(
                f"{method} was answered null; the last messages the client read:\n" + "\n".join(self.recent)
            )
        return result

    async def call_error(self, method: str, params: Any = None) -> JsonRpcException:
        """Call a method that must fail; return its error."""
        try:
            result = await self.call(method, params)
        except JsonRpcException as error:
            return error
        raise AssertionError(f"{method} succeeded but should have failed: {result}")

    @property
    def server_process(self) -> asyncio.subprocess.Process:
        assert self._server is not None
        return self._server

    def status_of(self, run_id: str) -> list[str]:
        return [s["status"] for s in self.statuses if s["runId"] == run_id]


async def start_server(
    root: Path,
    *,
    capabilities: str | types.ClientCapabilities = "visual-studio-code",
    init_options: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
    configuration: dict[str, Any] | None = None,
) -> ArenaClient:
    """Start ``arena-ls`` on ``root`` and initialize a session; ``configuration`` is what the
    client answers to ``workspace/configuration``."""
    client = ArenaClient()
    if configuration is not None:
        client.set_configuration(configuration)
    server_env = dict(os.environ)
    server_env.update(slow_callback_check(client))
    server_env.update(env or {})
    await client.start_io(*(command or [sys.executable, "-m", "arena_ls"]), env=server_env)
    options = {"python": sys.executable, **(init_options or {})}
    await asyncio.wait_for(
        client.initialize_session(
            types.InitializeParams(
                capabilities=client_capabilities(capabilities)
                if isinstance(capabilities, str)
                else capabilities,
                root_uri=root.as_uri(),
                initialization_options=options,
            )
        ),
        WAIT,
    )
    return client


SLOW_CALLBACK_MS = 50
"""The server's event loop never runs one callback for longer than this (CPU time): the check of
``arena_ls/loopcheck.py``, on for every server these helpers start."""


@functools.cache
def _slow_callback_folder() -> str:
    """One folder per test process for the check's reports, removed when the process exits (a
    report a test never read, its server left to the test's tear-down, is not left in /tmp)."""
    folder = tempfile.mkdtemp(prefix="arena-slow-callbacks-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def slow_callback_check(client: ArenaClient) -> dict[str, str]:
    """The server's environment for the slow-callback check, reporting into a file of the client's."""
    handle, path = tempfile.mkstemp(suffix=".log", dir=_slow_callback_folder())
    os.close(handle)
    client.slow_callback_log = Path(path)
    return {loopcheck.LIMIT_VARIABLE: str(SLOW_CALLBACK_MS), loopcheck.REPORT_VARIABLE: path}


def check_slow_callbacks(client: ArenaClient) -> None:
    """Fail the test if the server held its event loop (what the check reported), once."""
    path = client.slow_callback_log
    if path is None:
        return
    client.slow_callback_log = None
    try:
        reported = path.read_text(encoding="utf-8").strip()
        path.unlink()
    except OSError:
        return
    if reported:
        raise AssertionError(f"the server's event loop was held over {SLOW_CALLBACK_MS} ms:\n{reported}")


async def stop_server(client: ArenaClient) -> None:
    if client.stopped:
        check_slow_callbacks(client)
        return
    try:
        await asyncio.wait_for(client.shutdown_session(), WAIT)
    finally:
        await client.stop()
    check_slow_callbacks(client)


async def kill_server(client: ArenaClient) -> None:
    """kill -9 the server (no shutdown), and forget the session."""
    process = client.server_process
    process.kill()
    await process.wait()
    await client.stop()
    check_slow_callbacks(client)


async def wait_for(condition: Callable[[], Any], timeout: float = WAIT, what: str = "") -> Any:
    """Poll ``condition`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or condition}")
        await asyncio.sleep(0.02)


async def poll_until(
    condition: Callable[[], Awaitable[bool]], what: str, timeout: float = WAIT, pause: float = 0.05
) -> None:
    """Await ``condition`` (a request, say) every ``pause`` seconds until it holds, or fail after
    ``timeout``. The pause only spaces the polls (a longer one for a condition that costs, such as
    an HTTP request to a Ray head); the wait ends at the condition."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(pause)


STATUS_ASKED_AT_MOST_EVERY = 1.0
"""``wait_status`` asks ``arena/status`` this seldom unless a notification says the run got there."""


async def wait_status(
    client: ArenaClient, run_id: str, *statuses: str, timeout: float = WAIT
) -> dict[str, Any]:
    """Wait until ``arena/status`` reports the run in one of ``statuses``.

    A status request costs the server and this client some 4 ms of CPU (21 jobs, a live run):
    asked every 50 ms, a wait took a tenth of a core. So it is asked at once, then when an
    ``arena/statusChanged`` says the run reached one of ``statuses``, and otherwise every
    ``STATUS_ASKED_AT_MOST_EVERY`` seconds (a change no notification told); its answer is the
    wait's."""
    deadline = time.monotonic() + timeout
    told = len(client.statuses)
    asked_at = -STATUS_ASKED_AT_MOST_EVERY
    runs: list[dict[str, Any]] = []
    while True:
        news, told = client.statuses[told:], len(client.statuses)
        hinted = any(info.get("runId") == run_id and info.get("status") in statuses for info in news)
        if hinted or time.monotonic() - asked_at >= STATUS_ASKED_AT_MOST_EVERY:
            asked_at = time.monotonic()
            runs = (await client.call("arena/status", {}))["runs"]
            for run in runs:
                if run["runId"] == run_id and run["status"] in statuses:
                    return dict(run)
        if time.monotonic() > deadline:
            raise AssertionError(f"run {run_id} never reached {statuses}: {runs}")
        await asyncio.sleep(0.05)


async def judged_status(client: ArenaClient, timeout: float = WAIT) -> dict[str, Any]:
    """``arena/status`` once every job's trainer has its gates' verdict (no ``gatesPending``): a
    status never waits for the gates (issues 38 and 39), so a test that reads a verdict waits here."""
    deadline = time.monotonic() + timeout
    while True:
        result: dict[str, Any] = await client.call("arena/status", {})
        if not any(info.get("gatesPending") for info in result["jobs"]):
            return result
        if time.monotonic() > deadline:
            pending = [info["id"] for info in result["jobs"] if info.get("gatesPending")]
            raise AssertionError(f"the gates never judged {pending}")
        await asyncio.sleep(0.05)


async def all_logs(client: ArenaClient, run_id: str, limit: int = 1000) -> list[dict[str, Any]]:
    """Every line of a run through ``arena/logs`` paging."""
    lines: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = await client.call("arena/logs", {"runId": run_id, "cursor": cursor, "limit": limit})
        lines.extend(page["lines"])
        if not page["lines"]:
            return lines
        cursor = page["cursor"]


def job(
    job_id: str,
    *args: str,
    kind: str = "task",
    status: str = "ready",
    **extra: Any,
) -> dict[str, Any]:
    """A manifest job running the fake trainer with ``args``."""
    spec: dict[str, Any] = {
        "id": job_id,
        "name": f"Job {job_id}",
        "kind": kind,
        "command": "{python}",
        "args": ["fake_trainer.py", *args],
        "status": status,
    }
    if kind == "train":
        spec.setdefault("script", "fake_trainer.py")
        spec["resume"] = RESUME
    spec.update(extra)
    return spec


def make_workspace(root: Path, jobs: list[dict[str, Any]]) -> Path:
    """A workspace with the fake trainer and a manifest listing ``jobs``."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(FAKE_TRAINER, root / "fake_trainer.py")
    write_manifest(root, jobs)
    return root


def write_manifest(root: Path, jobs: list[dict[str, Any]]) -> None:
    (root / "training").mkdir(exist_ok=True)
    (root / "training" / "manifest.json").write_text(json.dumps({"version": 1, "jobs": jobs}, indent=2))


def run_dir(root: Path, run_id: str) -> Path:
    return root / ".aide" / "training" / "runs" / run_id


def spares_of(client: ArenaClient) -> list[psutil.Process]:
    """The server's spare agents: its children started with the spare flag."""
    try:
        children = psutil.Process(client.server_process.pid).children()
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if launch.SPARE_FLAG in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.Error:
            continue
    return found
