"""Workspaces whose jobs run on the session's Ray head (``runOn: "lab"``)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import struct
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from tests.cluster.conftest import RayHead
from tests.helpers.lsp import REPO, RESUME, job, make_workspace, start_server, stop_server

CLUSTER = "lab"
SIGNAL_STOP = {"method": "signal", "graceSeconds": 10}
PREFLIGHT_FAILED = 1005
LOCAL_ONLY_CHECKS = {"power", "ram", "gpu-contention", "disk"}
"""docs/preflight.md: the checks of this machine that the ``cluster`` check replaces."""
TASK_CHECKS = ("cluster", "state-dir")
TRAIN_CHECKS = ("cluster", "state-dir", "gates")
"""The pre-flight of a cluster job, in order (the ``cluster`` check first)."""


def cluster_job(job_id: str, *args: str, **extra: Any) -> dict[str, Any]:
    """A fake-trainer job that runs on the cluster and stops by signal (AR111 otherwise)."""
    extra.setdefault("stop", SIGNAL_STOP)
    return job(job_id, *args, runOn=CLUSTER, **extra)


def cluster_workspace(root: Path, jobs: list[dict[str, Any]]) -> Path:
    """A workspace whose manifest declares the cluster without its address (settings give it)."""
    make_workspace(root, jobs)
    manifest = root / "training" / "manifest.json"
    document = json.loads(manifest.read_text())
    document["clusters"] = {CLUSTER: {"kind": "ray"}}
    manifest.write_text(json.dumps(document, indent=2))
    return root


def train_workspace(tmp_path: Path, job_id: str, args: str, **extra: Any) -> Path:
    """A workspace whose one ``train`` job runs the fake trainer on the cluster with ``args``
    (split on spaces)."""
    return cluster_workspace(tmp_path / "ws", [cluster_job(job_id, *args.split(), kind="train", **extra)])


def numbered(lines: list[dict[str, Any]]) -> list[int]:
    return [int(line["text"].split()[1]) for line in lines if line["text"].startswith("numbered ")]


REFERENCE_CKPT_EVERY = 20
REFERENCE_LOG_EVERY = 5


def reference_workspace(root: Path, job_id: str, steps: int) -> Path:
    """A workspace whose one job is the reference trainer (``training/train.py``) on the cluster,
    small and quick: batches of 4, progress every 5 steps, a checkpoint every 20 into
    ``ROOT/checkpoints/JOB`` (an absolute path: storage the cluster's node, this machine, shares
    with us; checkpoints are never shipped in the ``working_dir``)."""
    training = root / "training"
    training.mkdir(parents=True)
    shutil.copy(REPO / "training" / "train.py", training / "train.py")
    shutil.copytree(REPO / "training" / "data", training / "data")
    args = [
        "training/train.py", "--steps", str(steps), "--ckpt-every", str(REFERENCE_CKPT_EVERY),
        "--log-every", str(REFERENCE_LOG_EVERY), "--batch-size", "4", "--eval-every", "1000",
        "--sample-chars", "0", "--ckpt-dir", str(root / "checkpoints" / job_id),
    ]  # fmt: skip
    reference = {
        "id": job_id, "kind": "train", "command": "{python}", "args": args, "script": "training/train.py",
        "env": {"OMP_NUM_THREADS": "1"}, "status": "ready", "resume": RESUME, "stop": SIGNAL_STOP,
        "runOn": CLUSTER,
    }  # fmt: skip
    manifest = {"version": 1, "clusters": {CLUSTER: {"kind": "ray"}}, "jobs": [reference]}
    (training / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return root


def options(head: RayHead, **override: Any) -> dict[str, Any]:
    """``initializationOptions`` naming the head's address, token file and interpreter."""
    settings = {"address": head.address, "tokenFile": str(head.token_file), "python": sys.executable}
    settings.update(override)
    return {"clusters": {CLUSTER: settings}}


def trainer_processes(run_id: str) -> list[psutil.Process]:
    """The run's trainer on the (local) cluster: found by the ``ARENA_RUN_ID`` Ray gave it."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if not any("fake_trainer.py" in part for part in process.info["cmdline"] or []):
                continue
            if process.environ().get("ARENA_RUN_ID") == run_id:
                found.append(process)
        except psutil.Error:
            continue
    return found


async def refusal(
    root: Path, init_options: dict[str, Any], job_id: str = "tiny", checks: tuple[str, ...] = TASK_CHECKS
) -> dict[str, Any]:
    """Start ``job_id``; return the failed ``cluster`` check of the 1005 refusal (and that no run exists).

    The refusal lists ``checks`` in this order: the ``cluster`` check first, none of this machine's
    ``power``, ``ram``, ``gpu-contention`` and ``disk`` (docs/preflight.md)."""
    client = await start_server(root, init_options=init_options)
    try:
        error = await client.call_error("arena/start", {"id": job_id})
        assert error.code == PREFLIGHT_FAILED, error
        data: dict[str, Any] = error.data or {}
        assert data["reason"] == "preflight-failed", data
        names = [check["name"] for check in data["checks"]]
        assert not LOCAL_ONLY_CHECKS & set(names), names
        assert names == list(checks), names
        status = await client.call("arena/status", {})
        assert status["runs"] == [], "nothing was started"
        check: dict[str, Any] = data["checks"][0]
        assert check["ok"] is False
        assert "cluster" in str(error) or "pre-flight" in str(error)
        return check
    finally:
        await stop_server(client)


class HeadProxy:
    """A loopback TCP proxy to the head's dashboard, owned by a test, that it switches.

    ``mode``: ``pass`` forwards each connection to the head; ``reset`` accepts it and
    resets it at once (the head has gone away: every request fails); ``hold`` answers
    nothing to requests whose first line starts with one of ``hold_prefixes`` (the head
    hangs on them) and forwards the others; a request whose first line starts with one of
    ``lose_prefixes`` reaches the head, whose answer is lost (the connection is reset once the
    head begins to answer). ``refused`` counts the connections reset, ``lost`` the answers lost."""

    def __init__(self, head: RayHead) -> None:
        host, port = head.address.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.mode = "pass"
        self.hold_prefixes: tuple[str, ...] = ()
        self.lose_prefixes: tuple[str, ...] = ()
        self.refused = 0
        self.lost = 0
        self.held: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> HeadProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        with self._lock:
            for sock in self._open + self.held:
                with contextlib.suppress(OSError):
                    sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        if self.mode == "reset":
            with self._lock:
                self.refused += 1
            _reset(client)
            return
        first = b""
        if self.hold_prefixes or self.lose_prefixes:
            while b"\r\n" not in first:
                chunk = client.recv(4096)
                if not chunk:
                    client.close()
                    return
                first += chunk
            if first.decode("latin-1").startswith(self.hold_prefixes):
                with self._lock:
                    self.held.append(client)
                return
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open += [client, upstream]
        if first:
            upstream.sendall(first)
        if first.decode("latin-1").startswith(self.lose_prefixes or ("\0",)):
            threading.Thread(target=_pump, args=(client, upstream), daemon=True).start()
            with contextlib.suppress(OSError):
                upstream.recv(65536)  # the head has answered (it acted on the request): dropped
            with self._lock:
                self.lost += 1
            _reset(client)
            _reset(upstream)
            return
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)


def _reset(sock: socket.socket) -> None:
    """Close with a reset (RST), as a head that went away does."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)  # else a thread blocked reading it keeps it open
    sock.close()


def _pump(source: socket.socket, target: socket.socket) -> None:
    """Copy ``source`` to ``target`` until either side closes, then close both."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


def head_job(head: RayHead, submission_id: str) -> dict[str, Any] | None:
    """The head's own record of a submission (not through arena-ls); None when Ray never heard of it."""
    try:
        job = head.request("GET", f"/api/jobs/{submission_id}")
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    return dict(job)


def put_package(head: RayHead, uri: str, data: bytes) -> None:
    """Store ``data`` on the head as the ``working_dir`` package ``uri`` (``gcs://_ray_pkg_….zip``)."""
    protocol, _, name = uri.partition("://")
    request = urllib.request.Request(
        f"{head.address}/api/packages/{protocol}/{name}",
        data=data,
        method="PUT",
        headers={"Authorization": f"Bearer {head.token}", "Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        answer.read()
