"""The slow-callback check (``arena_ls/loopcheck.py``) that every LSP test's server runs:
a callback over the limit is reported, one under it is not, nothing is counted before arming
(nor in the callback that arms), and a report says how much of it was garbage collection.

Each case runs in a fresh interpreter: the check patches asyncio for its whole process.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from arena_ls import loopcheck, platform

PROGRAM = """
import asyncio, gc, sys, threading, time
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

def spin():
    while True:  # a worker that wants the GIL all the time: the loop is handed it 1 ms at a time
        pass

async def main():
    loop = asyncio.get_running_loop()
    if sys.argv[2] == "contended":
        sys.setswitchinterval(0.001)
        threading.Thread(target=spin, daemon=True).start()
        loopcheck.arm()
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


GIL_WAIT_PROGRAM = """
import ast, asyncio, sys, threading, time
from arena_ls import loopcheck, platform
loopcheck.install_from_environment()
loopcheck.arm()
sys.setswitchinterval(0.001)  # the server's (protocol.main.SWITCH_INTERVAL)
TEXT = "".join(f"def helper_{i}(a):\\n    return a + {i}\\n" for i in range(160_000))

started = threading.Event()

def parse():
    started.set()
    ast.parse(TEXT)  # one C call: the GIL is held all along

def wait_behind_the_parse():
    before = platform.thread_cpu_and_waits()
    worker = threading.Thread(target=parse)
    worker.start()
    started.wait()  # returning needs the GIL back, which the worker holds until its parse ends
    after = platform.thread_cpu_and_waits()
    print(round((after[0] - before[0]) * 1000), after[1] - before[1])
    worker.join()

async def main():
    loop = asyncio.get_running_loop()
    ran = loop.create_future()
    loop.call_soon(wait_behind_the_parse)
    loop.call_soon(ran.set_result, None)
    await ran

asyncio.run(main())
"""


def test_a_callback_that_only_waits_for_the_gil_is_not_reported(tmp_path: Path) -> None:
    """Its waits' own CPU time is taken out: seconds behind a worker's ``ast.parse`` are not work."""
    report = tmp_path / "slow.log"
    env = {loopcheck.LIMIT_VARIABLE: "50", loopcheck.REPORT_VARIABLE: str(report), "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", GIL_WAIT_PROGRAM],
        env=env,
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    cpu_ms, waits = (int(figure) for figure in done.stdout.split())
    assert waits >= 200, f"the callback waited behind the parse ({waits} waits, {cpu_ms} ms of CPU)"
    assert not report.exists() or report.read_text() == "", report.read_text()


def test_a_threads_cpu_and_waits_are_counted_on_linux_and_its_cpu_alone_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpu, waits = platform.thread_cpu_and_waits()
    time.sleep(0.01)  # one voluntary context switch at least
    end = time.thread_time() + 0.02
    while time.thread_time() < end:
        pass
    cpu_after, waits_after = platform.thread_cpu_and_waits()
    assert cpu_after - cpu >= 0.015 and waits_after > waits
    monkeypatch.setattr(sys, "platform", "win32")  # Windows: no per-thread count of waits
    cpu_windows, waits_windows = platform.thread_cpu_and_waits()
    assert waits_windows == 0 and abs(cpu_windows - time.thread_time()) < 0.01


def test_a_callback_that_works_while_a_worker_wants_the_gil_is_still_reported(tmp_path: Path) -> None:
    """The waits taken out are about one a millisecond of it: its own work still counts."""
    reported = run_check(tmp_path, 0.3, armed="contended")
    assert reported.count("\n") == 1 and "busy" in reported, reported
