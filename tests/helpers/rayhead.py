"""A Ray head on loopback, for the cluster tests and the cluster benchmark (which imports it from here).

Token authentication on (a generated token), free ports, two CPUs, in a
process session of its own. At the end its unfinished jobs are stopped
first (``ray stop`` would kill them without a checkpoint), then only that
session's processes are ended: never another Ray on the machine.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

READY_TIMEOUT = 120.0
LIVE = ("PENDING", "RUNNING")


@attrs.frozen
class RayHead:
    address: str
    token_file: Path
    token: str
    env: dict[str, str]
    """The environment of Ray's own CLI against this head (token auth on)."""

    def request(self, method: str, path: str) -> Any:
        request = urllib.request.Request(
            self.address + path, method=method, headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read() or b"null")


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None and Path(ray_binary()).exists()


def ray_binary() -> str:
    return str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def ray_head() -> Iterator[RayHead]:
    """Start a head, yield it, and end exactly it (see the module docstring)."""
    temp = Path(tempfile.mkdtemp(prefix="arr", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    token = secrets.token_hex(32)
    token_file = temp / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    dashboard = free_port()
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_file),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_API_SERVER_ADDRESS": f"http://127.0.0.1:{dashboard}",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    argv = [
        ray_binary(), "start", "--head", "--node-ip-address=127.0.0.1", "--dashboard-host=127.0.0.1",
        f"--port={free_port()}", f"--dashboard-port={dashboard}", f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
        "--num-cpus=2", "--include-dashboard=true", f"--temp-dir={temp / 'ray'}", "--disable-usage-stats",
        # The log monitor tails every worker's log to stream it to drivers; arena-ls reads a job's
        # output through the Jobs API (the driver's log file), never from a driver. It was the
        # head's busiest process: 17.6 s of CPU over the cluster tests (docs/performance.md).
        "--include-log-monitor=false",
    ]  # fmt: skip
    head = RayHead(f"http://127.0.0.1:{dashboard}", token_file, token, env)
    group: int | None = None
    try:
        starter = subprocess.run(
            argv, env=env, start_new_session=True, capture_output=True, text=True, timeout=READY_TIMEOUT
        )
        group = _group_of(temp)
        if starter.returncode != 0:
            raise RuntimeError(f"ray start failed: {starter.stderr[-2000:]}")
        _wait_ready(head)
        yield head
    finally:
        _stop_jobs(head)
        _end_group(group if group is not None else _group_of(temp))
        shutil.rmtree(temp, ignore_errors=True)


def _group_of(temp: Path) -> int | None:
    """The process group of the head's processes (``ray start`` ran in a session of its own)."""
    import psutil

    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error, OSError):
            if any(str(temp) in part for part in process.info["cmdline"] or []):
                return os.getpgid(process.pid)
    return None


def _wait_ready(head: RayHead) -> None:
    """Until the head's job API answers (polled every 0.25 s), or fail after ``READY_TIMEOUT``."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            head.request("GET", "/api/jobs/")
            return
        except OSError as error:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Ray head's job API at {head.address} did not answer within "
                    f"{READY_TIMEOUT:.0f} s (last: {error})"
                ) from error
            time.sleep(0.25)


def _live_jobs(head: RayHead) -> list[str]:
    jobs = head.request("GET", "/api/jobs/") or []
    return [str(j["submission_id"]) for j in jobs if j.get("status") in LIVE and j.get("submission_id")]


def _stop_jobs(head: RayHead) -> None:
    """Stop every unfinished job first, and wait for them (``ray stop`` would just kill them).

    The wait is bounded (30 s, polled every 0.2 s) and fails nothing: a job still live after it
    ends with the head's process group (``_end_group``)."""
    with contextlib.suppress(OSError, ValueError):
        live = _live_jobs(head)
        for sid in live:
            head.request("POST", f"/api/jobs/{sid}/stop")
        deadline = time.monotonic() + 30
        while live and time.monotonic() < deadline:
            time.sleep(0.2)
            live = _live_jobs(head)


END_GRACE_S = 3.0
"""How long the head's processes get after SIGTERM. Measured here (Ray 2.60): ``gcs_server``
and a Python process of the head are still there 15 s after it (and a new raylet appears),
so every wait ended in SIGKILL anyway; the head's jobs are stopped before this, and nothing
of the head is kept, so a short grace loses nothing and saves 12 s per head."""


def _end_group(group: int | None) -> None:
    """End the head's process group only (SIGTERM, then SIGKILL): never another Ray here."""
    if group is None or group == os.getpgid(0):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + END_GRACE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)


def serve() -> None:
    """``python -m tests.helpers.rayhead``: a head for a process without Ray (the VS Code e2e
    test runs in a venv of its own). Prints one JSON line (``address``, ``tokenFile``) once
    the head is ready, holds it until stdin closes (the caller ended or died), then ends
    exactly it."""
    with ray_head() as head:
        print(json.dumps({"address": head.address, "tokenFile": str(head.token_file)}), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    serve()
