"""Ending what a test's runs left behind.

A run outlives its client by design (contract 1), so a test whose client
leaves without stopping its run (the TCP leaver of ``tests/attacks``) must
end that run's processes itself, or they go on loading the machine for the
rest of the suite.
"""

from __future__ import annotations

from pathlib import Path

import psutil


def kill_runs_of(workspace: Path) -> list[int]:
    """Kill every job agent whose command line names ``workspace``, with its whole tree.

    The agent's command line holds its run folder (under the workspace); the
    trainer is its child. Returns the pids killed.
    """
    marker = str(workspace)
    killed: list[int] = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if not any(marker in part for part in process.info["cmdline"] or ()):
                continue
            tree = [*process.children(recursive=True), process]
            for member in tree:
                member.kill()
                killed.append(member.pid)
        except psutil.Error:
            continue
    psutil.wait_procs([p for p in map(_existing, killed) if p is not None], timeout=10)
    return killed


def _existing(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None
