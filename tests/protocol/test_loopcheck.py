"""The slow-callback check (``arena_ls/loopcheck.py``) that every LSP test's server runs:
a callback over the limit is reported, one under it is not, nothing is counted before arming
(nor in the callback that arms), and a report says how much of it was garbage collection.

Each case runs in a fresh interpreter: the check patches asyncio for its whole process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from arena_ls import loopcheck

PROGRAM = """
import asyncio, gc, sys, time
from arena_ls import loopcheck
loopcheck.install_from_environment()
if sys.argv[2] == "armed":
    loopcheck.arm()

def busy():
    end = time.thread_time() + float(sys.argv[1])
    while time.thread_time() < end:
        if sys.argv[2] == "collecting":
            cycles = [[] for _ in range(20000)]
            for cycle in cycles:
                cycle.append(cycle)
            del cycles
            gc.collect()

async def main():
    loop = asyncio.get_running_loop()
    if sys.argv[2] in ("arming", "collecting"):
        busy()  # the callback that arms is start-up's last: not counted
        loopcheck.arm()
        await asyncio.sleep(0)
    ran = loop.create_future()
    loop.call_soon(busy)
    loop.call_soon(ran.set_result, None)  # callbacks run in the order given: busy has run
    await ran
    await asyncio.to_thread(busy)  # a worker thread's CPU is not the loop's

asyncio.run(main())
"""


def run_check(tmp_path: Path, seconds: float, armed: bool | str) -> str:
    report = tmp_path / "slow.log"
    env = {loopcheck.LIMIT_VARIABLE: "50", loopcheck.REPORT_VARIABLE: str(report), "PATH": ""}
    subprocess.run(
        [
            sys.executable,
            "-c",
            PROGRAM,
            str(seconds),
            armed if isinstance(armed, str) else "armed" if armed else "not",
        ],
        env=env,
        check=True,
        timeout=120,
        capture_output=True,
    )
    return report.read_text() if report.exists() else ""


def test_a_callback_over_the_limit_is_reported_naming_it(tmp_path: Path) -> None:
    reported = run_check(tmp_path, 0.2, armed=True)
    assert reported.count("\n") == 1, reported
    assert "held the event loop" in reported and "busy" in reported


@pytest.mark.parametrize(("seconds", "armed"), [(0.01, True), (0.2, False)])
def test_a_short_callback_or_one_before_arming_is_not(tmp_path: Path, seconds: float, armed: bool) -> None:
    assert run_check(tmp_path, seconds, armed) == ""


def test_the_callback_that_arms_is_not_counted_and_the_next_one_is(tmp_path: Path) -> None:
    reported = run_check(tmp_path, 0.2, armed="arming")
    assert reported.count("\n") == 1, reported  # busy before arming is not; busy after is
    assert "busy" in reported and "garbage collection" not in reported


def test_a_report_names_the_share_of_garbage_collection(tmp_path: Path) -> None:
    reported = run_check(tmp_path, 0.2, armed="collecting")
    assert reported.count("\n") == 1, reported
    assert "garbage collection(s) of generation(s) [" in reported and "2]" in reported, reported
