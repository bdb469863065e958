"""Running real ``arena`` processes from tests, and waiting for what they print.

Output is read in threads as it comes; tests wait for a line with a deadline
(``wait_for_line``) and never sleep for it. Every ``arena`` runs with stdout
and stderr on pipes (not a terminal) and ``ARENA_NO_COLOR=1``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tests.helpers.lsp import start_server, stop_server
from tests.helpers.waiting import DEADLINE_S, wait_until

WAIT = 90.0
"""Deadline for one ``arena`` command or one awaited line (CI machines are loaded)."""
ARENA = [sys.executable, "-m", "arena_ls.client.cli"]
STARTED = re.compile(r"started run (\S+) of job (\S+)")


def arena_env() -> dict[str, str]:
    env = dict(os.environ)
    env["ARENA_NO_COLOR"] = "1"
    env.pop("FORCE_COLOR", None)
    return env


def run_arena(root: Path, *args: str, timeout: float = WAIT) -> subprocess.CompletedProcess[str]:
    """Run ``arena ARGS --root ROOT`` to its end."""
    return subprocess.run(
        [*ARENA, *args, "--root", str(root)],
        capture_output=True,
        text=True,
        env=arena_env(),
        cwd=root,
        timeout=timeout,
        check=False,
    )


def status_json(root: Path) -> dict[str, Any]:
    done = run_arena(root, "status", "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run_of(root: Path, run_id: str) -> dict[str, Any]:
    return run_in(status_json(root), run_id)


def run_in(status: dict[str, Any], run_id: str) -> dict[str, Any]:
    """The run ``run_id`` of an ``arena status --json``."""
    for run in status["runs"]:
        if run["runId"] == run_id:
            return dict(run)
    raise AssertionError(f"no run {run_id} in arena status")


def state_on_disk(root: Path, run_id: str) -> dict[str, Any]:
    """The run's ``state.json`` as its agent last wrote it ({} while unreadable)."""
    return states_on_disk(root).get(run_id, {})


FINAL = frozenset({"stopped", "succeeded", "crashed", "lost"})
STATUS_AT_MOST_EVERY = 5.0
"""While the runs' files do not yet say so, ``wait_for_status`` asks ``arena status`` this seldom."""


def states_on_disk(root: Path) -> dict[str, dict[str, Any]]:
    """Each run's ``state.json`` as its agent last wrote it, by run id; a state being replaced
    (unreadable for a moment) is left out, and read at the next poll. Starts no process."""
    states: dict[str, dict[str, Any]] = {}
    for path in (root / ".aide" / "training" / "runs").glob("*/state.json"):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(state, dict):
            states[path.parent.name] = state
    return states


def unfinished_on_disk(root: Path) -> list[dict[str, Any]]:
    """The states of the runs whose agents have not written an end."""
    return [state for state in states_on_disk(root).values() if state.get("status") not in FINAL]


def wait_for_status(
    root: Path,
    holds: Callable[[dict[str, Any]], Any],
    what: str,
    *,
    files_say: Callable[[Path], Any],
    timeout: float = DEADLINE_S,
) -> Any:
    """Wait until ``holds(arena status --json)`` is truthy, and return it.

    Every ``arena status`` starts a client and its server (a second of CPU): polled every 20 ms
    through a minute-long run, the suite's waits cost hundreds of them. So the runs' files are
    polled (``files_say``: what they say once the status would hold), and ``arena status`` is
    asked when they say so, or every ``STATUS_AT_MOST_EVERY`` seconds: its verdict is the wait's
    (a run whose agent died without a word is ``lost`` there, never in its files)."""
    asked = [time.monotonic()]

    def status_holds() -> Any:
        if not files_say(root) and time.monotonic() - asked[0] < STATUS_AT_MOST_EVERY:
            return None
        asked[0] = time.monotonic()
        return holds(status_json(root))

    return wait_until(status_holds, what, timeout=timeout)


def wait_until_no_run_is_active(root: Path, what: str, timeout: float = DEADLINE_S) -> None:
    """Until ``arena status`` shows no active run (its files say every run ended)."""
    wait_for_status(
        root,
        lambda status: status["active"] is None or None,
        what,
        files_say=lambda root: not unfinished_on_disk(root),
        timeout=timeout,
    )


def one_line(text: str) -> str:
    """The only line of ``text``; fails when there are more or none."""
    lines = text.splitlines()
    assert len(lines) == 1, f"expected exactly one line, got {lines!r}"
    return lines[0]


class ArenaProcess:
    """A running ``arena`` whose stdout and stderr lines are collected as they come."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [*ARENA, *args, "--root", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**arena_env(), **(env or {})},
            cwd=root,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.out), daemon=True),
            threading.Thread(target=self._read, args=(self.process.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream: IO[str], into: list[str]) -> None:
        for line in stream:
            with self._changed:
                into.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float = WAIT) -> re.Match[str]:
        """The first stdout line matching ``pattern``; fails at the deadline or when arena exits."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.out:
                    match = regex.search(line)
                    if match:
                        return match
                left = deadline - time.monotonic()
                exited = self.process.poll() is not None and not any(r.is_alive() for r in self._readers)
                if left <= 0 or exited:
                    raise AssertionError(
                        f"no line matching {pattern!r} (exit {self.process.poll()}):\n"
                        + "\n".join(self.out[-40:])
                        + "\nstderr:\n"
                        + "\n".join(self.err[-20:])
                    )
                self._changed.wait(min(left, 0.5))

    def run_id(self) -> str:
        return self.wait_for_line(STARTED.pattern).group(1)

    def wait(self, timeout: float = WAIT) -> int:
        code = self.process.wait(timeout)
        for reader in self._readers:
            reader.join(timeout)
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.wait()

    @property
    def stdout(self) -> str:
        return "\n".join(self.out)

    @property
    def stderr(self) -> str:
        return "\n".join(self.err)


def never_ran(root: Path) -> bool:
    """Whether no run was ever made in ``root`` (nor begun: a run is built in ``runs/.new-<id>``,
    and its lock taken, before it can start). The ``arena`` processes a test ran have ended."""
    state = root / ".aide" / "training"
    runs = state / "runs"
    return not (state / "active.lock").exists() and not (runs.is_dir() and any(runs.iterdir()))


def stop_every_run(root: Path) -> None:
    """Leave no run behind a test: kill whatever is active, through a separate LSP client (no
    server is started for a workspace that never had a run)."""
    if never_ran(root):
        return

    async def stop() -> None:
        client = await start_server(root)
        try:
            await client.call("arena/stop", {"kill": True, "confirm": True})
        finally:
            await stop_server(client)

    asyncio.run(stop())
