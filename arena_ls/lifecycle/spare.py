"""A spare job agent: started and loaded while the workspace is idle, handed the next run.

Why: a run's first line waited for a fresh interpreter and the agent's
imports before its trainer could even start (about 80 ms on a quiet
machine, several times the trainer's own start-up). A spare agent pays
that while nothing runs. ``arena/start`` then only writes one line to the
spare's stdin, and the trainer starts within milliseconds.

The rules, kept by ``SpareAgent``:

- At most one spare per server and workspace, and only while no run of
  this workspace is active (the supervisor asks for one when it finds the
  workspace idle). A running trainer never shares the machine with an idle
  spare (about 30 MB and an interpreter that waits).
- The spare is handed a run once. Its stdin is a pipe that only its server
  holds: nobody else can give it a run, and when the server goes away, for
  any reason (a clean exit, a crash, kill -9), the spare reads end-of-file
  and exits, having started nothing.
- A spare that has died, or that was loaded for another workspace, is never
  handed a run: the start falls back to a cold agent (``spawn_detached``),
  the path Windows always takes (``platform.SPARE_AGENT``). After three
  spares died unasked, the server keeps none.
- A spare that dies after it was handed the run, before it claimed it
  (``trainer_start.claim_run``), started nothing: the run's agent is
  started cold (``LocalBackend.start_again``). After the claim, the start
  fails (1009): the spare may have started the trainer, and no trainer is
  started twice.
- Once handed its run, the spare is that run's agent, the same as a cold
  one: the same process tree, the same files, the same ``agent.log``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from arena_ls import platform
from arena_ls.agent import launch
from arena_ls.run.rundir import RunDir

log = logging.getLogger(__name__)

DISABLE_VARIABLE = "ARENA_NO_SPARE_AGENT"
"""Set to ``1`` in the server's environment to start every agent cold (for diagnosis and A/B benchmarks)."""

MOST_DEATHS = 3
"""Spares that may die unasked before a server gives up keeping one (see ``SpareAgent.ensure``)."""

SpawnSpare = Callable[[list[str], Path], "subprocess.Popen[bytes] | None"]


def _spawn(argv: list[str], cwd: Path) -> subprocess.Popen[bytes] | None:
    return platform.spawn_spare_agent(argv, cwd=cwd)


def agent_argv(run_dir: RunDir) -> list[str]:
    """A cold agent's command line: this server's interpreter, the launch module, the run folder."""
    return [sys.executable, "-m", launch.__name__, str(run_dir.path)]


def spare_argv() -> list[str]:
    """The spare's command line: a cold agent's, with the spare flag for the run folder."""
    return [sys.executable, "-m", launch.__name__, launch.SPARE_FLAG]


class SpareAgent:
    """One server's spare agent for one workspace (see the module docstring)."""

    def __init__(
        self,
        spawn: SpawnSpare = _spawn,
        *,
        enabled: bool | None = None,
        idle_for: float = 0.0,
    ) -> None:
        self._spawn = spawn
        self.idle_for = idle_for
        """Seconds the workspace stays idle, from the ``ensure_soon`` that asked, before the spare
        starts: a run started sooner goes cold, and a session that ends sooner loaded nothing."""
        self._due = 0.0
        """``time.monotonic()`` at which the spare ``ensure_soon`` asked for starts."""
        self.enabled = enabled if enabled is not None else _enabled_here()
        self._process: subprocess.Popen[bytes] | None = None
        self._workspace: Path | None = None
        self.deaths = 0
        """Spares that died before they were handed a run."""
        self._lock = threading.RLock()
        """Held while a spare is started, handed or let go: ``ensure_soon`` starts it on a thread."""
        self._changed = threading.Condition(self._lock)
        """Notified when the spare is no longer wanted (``take``, ``release``): the thread waiting
        for ``_due`` ends at once, and a closing server does not wait for it."""
        self._soon: Path | None = None
        """The workspace ``ensure_soon`` asked a spare for, until its thread starts it (or a
        ``take`` / ``release`` meanwhile says it is no longer wanted)."""
        self._thread: ThreadPoolExecutor | None = None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The spare waiting now, if any (for tests and diagnostics)."""
        return self._process

    def ensure_soon(self, workspace: Path) -> None:
        """``ensure`` on a worker thread of the spare's own, once the workspace was idle
        ``idle_for`` seconds: the event loop never waits for the spare's
        fork and exec (8-14 ms of the loop on the project's VM, in the first status's way at
        start-up), and the spare's interpreter does not load beside start-up's first requests
        or a run's last moments. A ``take`` or ``release`` before that thread began cancels it;
        one while it starts the spare waits for it (the lock), then hands the spare on or lets
        it go."""
        if not self.enabled or self._soon == workspace:
            return
        if not self._lock.acquire(blocking=False):  # a spare is being started or handed now
            return
        try:
            if self._waiting_for(workspace):
                return
            self._soon = workspace
            self._due = time.monotonic() + self.idle_for
        finally:
            self._lock.release()
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="arena-spare")
        self._thread.submit(self._ensure_if_wanted, workspace)

    def _ensure_if_wanted(self, workspace: Path) -> None:
        with self._changed:  # the spare's own thread: nothing else waits meanwhile
            while self._soon == workspace and (wait := self._due - time.monotonic()) > 0:
                self._changed.wait(wait)  # the lock is free meanwhile; a take or release wakes it
            if self._soon != workspace:
                return
            self._soon = None
            try:
                self.ensure(workspace)
            except Exception:  # a thread's failure would otherwise go unseen
                log.exception("starting a spare job agent failed (runs start cold)")

    def _waiting_for(self, workspace: Path) -> bool:
        return self._process is not None and self._process.poll() is None and self._workspace == workspace

    def ensure(self, workspace: Path) -> None:
        """Have a live spare for ``workspace``: start one unless one waits already.

        A spare that died unasked counts as a failure; after ``MOST_DEATHS`` of
        them this server stops keeping spares (a broken environment would
        otherwise start an interpreter every idle round) and starts cold.
        """
        if not self.enabled:
            return
        with self._lock:
            self._ensure(workspace)

    def _ensure(self, workspace: Path) -> None:
        if self._waiting_for(workspace):
            return
        if self._process is not None and self._process.returncode is not None:
            self.deaths += 1
            if self.deaths >= MOST_DEATHS:
                log.warning(
                    "the spare job agent died %d times unasked (exit code %s): runs start cold from now on",
                    self.deaths,
                    self._process.returncode,
                )
                self.enabled = False
                self.release()
                return
        self.release()
        try:
            self._process = self._spawn(spare_argv(), workspace)
        except OSError as error:
            log.warning("could not start a spare job agent (runs start cold): %s", error)
            self._process = None
        self._workspace = workspace if self._process is not None else None

    def take(self, run_dir: RunDir, workspace: Path) -> subprocess.Popen[bytes] | None:
        """Hand ``run_dir`` to the spare; the spare (now the run's agent), or None to start one cold."""
        with self._lock:
            self._not_wanted()
            return self._take(run_dir, workspace)

    def _take(self, run_dir: RunDir, workspace: Path) -> subprocess.Popen[bytes] | None:
        process, self._process = self._process, None
        matches = self._workspace == workspace
        self._workspace = None
        if process is None:
            return None
        if not matches or process.poll() is not None or process.stdin is None:
            _dismiss(process)
            return None
        order = json.dumps({"runDir": str(run_dir.path), "agentLog": str(run_dir.agent_log)}) + "\n"
        try:
            process.stdin.write(order.encode("utf-8"))
            process.stdin.close()
        except OSError as error:  # it died since: EPIPE
            log.info("the spare job agent was gone (%s); starting the run's agent cold", error)
            _dismiss(process)
            return None
        return process

    def _not_wanted(self) -> None:
        """No spare is to start for an ``ensure_soon`` still waiting (the lock is held)."""
        self._soon = None
        self._changed.notify_all()

    def release(self) -> None:
        """Let the spare go (it exits at end-of-file); the server is closing, or the spare is stale."""
        with self._lock:
            self._not_wanted()
            process, self._process = self._process, None
            self._workspace = None
        if process is not None:
            _dismiss(process)


def _dismiss(process: subprocess.Popen[bytes]) -> None:
    """Close the spare's order pipe (it exits, having started nothing) and reap it if it has already gone."""
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    process.poll()


def _enabled_here() -> bool:
    return platform.SPARE_AGENT and os.environ.get(DISABLE_VARIABLE, "") not in ("1", "true", "yes")
