"""supervisord as the reference: one instance per benchmark, driven through its XML-RPC API.

Its RPC listens on a unix socket in a temporary folder (never on a network
port). Programs are started with ``startProcess(name, False)`` and waited
for by polling ``getProcessInfo`` (supervisord's own ``wait=True`` is a busy
wait inside it); their stdout goes to ``stdout_logfile`` with rotation off,
so the whole output is kept, as arena-ls keeps it.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
from supervisor.xmlrpc import SupervisorTransport  # type: ignore[import-untyped]

POLL_SECONDS = 0.02
FINAL_STATES = {"EXITED", "STOPPED", "FATAL", "BACKOFF", "UNKNOWN"}


@attrs.define
class Program:
    """One ``[program:x]`` section."""

    name: str
    argv: list[str]
    env: dict[str, str] = attrs.field(factory=dict)
    stopasgroup: bool = False
    killasgroup: bool = False
    stopwaitsecs: int = 10

    def section(self, folder: Path) -> str:
        command = " ".join(_quote(arg) for arg in self.argv)
        lines = [
            f"[program:{self.name}]",
            f"command={command}",
            f"directory={folder}",
            "autostart=false",
            "autorestart=false",
            "startsecs=0",
            "startretries=0",
            f"stdout_logfile={self.log_path(folder)}",
            "stdout_logfile_maxbytes=0",
            "stdout_logfile_backups=0",
            f"stderr_logfile={folder / (self.name + '.err.log')}",
            "stderr_logfile_maxbytes=0",
            "stopsignal=TERM",
            f"stopwaitsecs={self.stopwaitsecs}",
            f"stopasgroup={'true' if self.stopasgroup else 'false'}",
            f"killasgroup={'true' if self.killasgroup else 'false'}",
        ]
        if self.env:
            pairs = ",".join(f'{key}="{value}"' for key, value in self.env.items())
            lines.append(f"environment={pairs}")
        return "\n".join(lines) + "\n"

    def log_path(self, folder: Path) -> Path:
        return folder / f"{self.name}.out.log"


def _quote(arg: str) -> str:
    if not arg or any(c in arg for c in " \t\"'%"):
        return '"' + arg.replace("%", "%%").replace('"', '\\"') + '"'
    return arg


class Supervisord:
    """A running supervisord and its RPC proxy."""

    def __init__(self, folder: Path, programs: list[Program]) -> None:
        self.folder = folder
        self.programs = {p.name: p for p in programs}
        self.socket = folder / "supervisor.sock"
        self.conf = folder / "supervisord.conf"
        self.process: subprocess.Popen[bytes] | None = None
        self.rpc: Any = None

    def write_conf(self) -> None:
        head = (
            "[unix_http_server]\n"
            f"file={self.socket}\n"
            "chmod=0700\n\n"
            "[supervisord]\n"
            "nodaemon=true\n"
            f"logfile={self.folder / 'supervisord.log'}\n"
            f"pidfile={self.folder / 'supervisord.pid'}\n"
            f"childlogdir={self.folder}\n\n"
            "[rpcinterface:supervisor]\n"
            "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
        )
        body = "\n".join(p.section(self.folder) for p in self.programs.values())
        self.conf.write_text(head + body)

    def start(self, timeout: float = 30.0) -> None:
        self.write_conf()
        supervisord = Path(sys.executable).parent / "supervisord"
        env = dict(os.environ)
        env.pop("PYTHONUNBUFFERED", None)
        with open(self.folder / "supervisord.stderr", "ab") as err:
            self.process = subprocess.Popen(
                [str(supervisord), "-c", str(self.conf)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while True:
            if self.socket.exists():
                self.rpc = self._proxy()  # a failed request leaves a transport unusable
                with contextlib.suppress(OSError, xmlrpc.client.Error, http.client.HTTPException):
                    if self.rpc.supervisor.getState()["statename"] == "RUNNING":
                        return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"supervisord did not start; see {self.folder / 'supervisord.log'}")
            time.sleep(0.02)

    def _proxy(self) -> Any:
        transport = SupervisorTransport(None, None, serverurl=f"unix://{self.socket}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def state(self, name: str) -> dict[str, Any]:
        info: dict[str, Any] = self.rpc.supervisor.getProcessInfo(name)
        return info

    def start_program(self, name: str) -> None:
        """Start without supervisord's busy wait, after clearing the previous run's log."""
        log = self.programs[name].log_path(self.folder)
        with contextlib.suppress(FileNotFoundError):
            log.unlink()
        self.rpc.supervisor.startProcess(name, False)

    def wait_state(
        self, name: str, states: set[str], timeout: float = 600.0, poll: float = POLL_SECONDS
    ) -> tuple[float, dict[str, Any]]:
        """Poll until ``name`` is in one of ``states``; (perf_counter when seen, info)."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.state(name)
            if info["statename"] in states:
                return time.perf_counter(), info
            if time.monotonic() > deadline:
                raise TimeoutError(f"supervisord program {name} stuck in {info['statename']}")
            time.sleep(poll)

    def stop_program(self, name: str) -> None:
        self.rpc.supervisor.stopProcess(name, False)

    def log_size(self, name: str) -> int:
        try:
            return self.programs[name].log_path(self.folder).stat().st_size
        except FileNotFoundError:
            return 0

    def close(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError, xmlrpc.client.Error):
            self.rpc.supervisor.shutdown()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def running(folder: Path, programs: list[Program]) -> Iterator[Supervisord]:
    daemon = Supervisord(folder, programs)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.close()
