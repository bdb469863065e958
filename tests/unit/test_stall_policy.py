"""The stall policy (``agent/stall.py``) and its evidence (``agent/stall_probe.py``), every branch.

Pure: the clock, the readings and py-spy's runs are given; nothing here starts a process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from arena_ls import platform
from arena_ls.agent.local.stall import StallFinding, TreeCpu
from arena_ls.agent.stall import (
    RestartFacts,
    StallAction,
    StallClock,
    StallRules,
    Verdict,
    WindowUse,
    judge,
)
from arena_ls.agent.stall_probe import StackDump, dump_stacks, find_py_spy, gpu_busy, why_dump_failed
from arena_ls.health.model import GpuReading
from tests.helpers.fake_hardware import fake_gpu

WARN = StallRules(factor=10, min_seconds=120, max_seconds=600)
RESTART = StallRules(factor=10, min_seconds=120, max_seconds=600, action=StallAction.RESTART)
CAN_RESTART = RestartFacts(checkpoint=40, relaunchable=True)
IDLE = WindowUse(seconds=130, cpu_seconds=0.01)


# -- the threshold ---------------------------------------------------------------------------------


def test_before_two_steps_the_threshold_is_stall_seconds() -> None:
    assert WARN.threshold([]) == 600


def test_fast_steps_get_the_floor() -> None:
    assert WARN.threshold([0.05, 0.06, 0.04]) == 120


def test_the_threshold_is_factor_times_the_median_step() -> None:
    assert WARN.threshold([20.0, 25.0, 1000.0]) == 250  # the median, not the mean: one slow step


def test_slow_steps_are_capped_at_stall_seconds() -> None:
    assert WARN.threshold([90.0, 100.0]) == 600


def test_a_floor_above_the_ceiling_gives_way_to_the_ceiling() -> None:
    assert StallRules(min_seconds=120, max_seconds=1).threshold([0.1]) == 1


# -- the window's use ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "grew"),
    [(None, False), (0.0, False), (0.1, False), (2.6, False), (2.61, True), (130.0, True)],
)
def test_cpu_time_grew_means_over_two_percent_of_the_window(cpu: float | None, grew: bool) -> None:
    assert WindowUse(seconds=130, cpu_seconds=cpu).cpu_grew is grew


def test_a_short_window_needs_a_tenth_of_a_second() -> None:
    assert not WindowUse(seconds=2, cpu_seconds=0.09).cpu_grew
    assert WindowUse(seconds=2, cpu_seconds=0.11).cpu_grew


@pytest.mark.parametrize(("percent", "busy"), [(None, False), (0, False), (4, False), (5, True), (97, True)])
def test_a_gpu_busy_five_percent_is_work(percent: int | None, busy: bool) -> None:
    assert WindowUse(seconds=10, cpu_seconds=0.0, gpu_busy_percent=percent).gpu_busy is busy


def test_the_use_is_said_with_why_the_gpu_is_unknown() -> None:
    assert IDLE.describe() == "CPU 0.0s over the last 130s; GPU use unknown (not read)"
    unreadable = WindowUse(seconds=5, cpu_seconds=None, gpu_note="no NVIDIA driver")
    assert unreadable.describe() == "CPU time unreadable over the last 5s; GPU use unknown (no NVIDIA driver)"
    busy = WindowUse(seconds=5, cpu_seconds=1.0, gpu_busy_percent=88)
    assert busy.describe() == "CPU 1.0s over the last 5s; GPU busy up to 88%"


# -- the verdict -----------------------------------------------------------------------------------


def test_a_trainer_whose_cpu_time_grew_is_never_restarted() -> None:
    decision = judge(RESTART, 130, 120, WindowUse(seconds=130, cpu_seconds=125.0), CAN_RESTART)
    assert decision.verdict is Verdict.WORKING and not decision.restart
    assert "still working (its CPU time grew" in decision.message and "not restarted" in decision.message


def test_a_trainer_whose_gpu_is_busy_is_never_restarted() -> None:
    use = WindowUse(seconds=130, cpu_seconds=0.0, gpu_busy_percent=90)
    decision = judge(RESTART, 130, 120, use, CAN_RESTART)
    assert decision.verdict is Verdict.WORKING and not decision.restart
    assert "its GPU is busy" in decision.message


def test_still_working_under_warn_says_no_restart_was_ever_meant() -> None:
    decision = judge(WARN, 130, 120, WindowUse(seconds=130, cpu_seconds=125.0), CAN_RESTART)
    assert decision.verdict is Verdict.WORKING and "not restarted" not in decision.message


def test_an_unreadable_cpu_time_is_never_a_reason_to_restart() -> None:
    decision = judge(RESTART, 130, 120, WindowUse(seconds=130, cpu_seconds=None), CAN_RESTART)
    assert decision.verdict is Verdict.UNKNOWN and not decision.restart
    assert "unknown" in decision.message and "not restarted" in decision.message
    assert "the trainer is stalled" in decision.message
    under_warn = judge(WARN, 130, 120, WindowUse(seconds=130, cpu_seconds=None), CAN_RESTART)
    assert under_warn.verdict is Verdict.UNKNOWN and "not restarted" not in under_warn.message


def test_a_window_too_short_to_tell_is_never_a_reason_to_restart() -> None:
    decision = judge(RESTART, 130, 120, WindowUse(seconds=0.4, cpu_seconds=0.0), CAN_RESTART)
    assert decision.verdict is Verdict.UNKNOWN and not decision.restart


def test_an_idle_trainer_under_warn_is_warned_about() -> None:
    decision = judge(WARN, 130, 120, IDLE, CAN_RESTART)
    assert decision.verdict is Verdict.IDLE and not decision.restart
    assert decision.message.startswith("no progress announced for 130s (stall threshold 120s)")
    assert decision.message.endswith("the trainer is stalled")


def test_an_idle_trainer_under_restart_is_restarted() -> None:
    decision = judge(RESTART, 130, 120, IDLE, CAN_RESTART)
    assert decision.verdict is Verdict.IDLE and decision.restart
    assert "restarting it from its last checkpoint" in decision.message


def test_no_restart_without_a_checkpoint() -> None:
    decision = judge(RESTART, 130, 120, IDLE, RestartFacts(checkpoint=None, relaunchable=True))
    assert not decision.restart and "no checkpoint to restart from" in decision.message


def test_no_restart_of_a_job_that_is_not_relaunched() -> None:
    decision = judge(RESTART, 130, 120, IDLE, RestartFacts(checkpoint=40, relaunchable=False))
    assert not decision.restart and "the job is not relaunched" in decision.message


# -- the clock -------------------------------------------------------------------------------------


def test_step_times_are_the_gaps_between_announcements_that_advanced() -> None:
    clock = StallClock(WARN, now=0.0)
    clock.progress(1, 10.0)  # the first: the start-up is no step
    clock.progress(1, 11.0)  # a redraw of the same step: no step either
    clock.progress(2, 13.0)
    clock.progress(4, 17.0)
    assert list(clock.step_seconds) == [3.0, 4.0]  # step 1 began at 10 s, not at its redraw


def test_a_silence_past_the_threshold_is_due_once_under_warn() -> None:
    clock = StallClock(WARN, now=0.0)
    assert not clock.due(599.0) and clock.due(600.0)
    clock.judged(judge(WARN, 600, 600, IDLE, CAN_RESTART), 600.0)
    assert clock.stalled and not clock.due(5000.0)


def test_a_trainer_still_working_under_restart_is_judged_again_a_threshold_later() -> None:
    clock = StallClock(RESTART, now=0.0)
    clock.progress(1, 0.0)
    clock.progress(2, 1.0)  # 1 s steps: the floor, 120 s
    working = judge(RESTART, 121, 120, WindowUse(seconds=121, cpu_seconds=100.0), CAN_RESTART)
    clock.judged(working, 121.0)
    assert not clock.due(240.0) and clock.due(241.0)


def test_an_idle_verdict_under_restart_is_not_judged_again() -> None:
    clock = StallClock(RESTART, now=0.0)
    clock.judged(judge(RESTART, 600, 600, IDLE, CAN_RESTART), 600.0)
    assert not clock.due(10_000.0)


def test_progress_ends_a_stall_and_starts_the_silence_anew() -> None:
    clock = StallClock(WARN, now=0.0)
    clock.judged(judge(WARN, 600, 600, IDLE, CAN_RESTART), 600.0)
    assert clock.progress(1, 700.0) is True and not clock.stalled
    assert clock.progress(2, 701.0) is False
    assert not clock.due(820.0) and clock.due(821.0)


# -- the evidence ----------------------------------------------------------------------------------

DUMP = """Process 4242: python train.py --steps 30
Python v3.11.7 (/usr/bin/python3.11)

Thread 4242 (idle): "MainThread"
    hang_in_sleep (train.py:30)
    main (train.py:150)
    <module> (train.py:200)
Thread 4250 (idle): "loader"
    wait (threading.py:320)
"""


def runner(answers: dict[int, subprocess.CompletedProcess[str] | BaseException]) -> object:
    calls: list[int] = []

    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        pid = int(argv[-1])
        calls.append(pid)
        answer = answers[pid]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    run.calls = calls  # type: ignore[attr-defined]
    return run


def done(code: int, out: str = "", err: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], code, out, err)


def test_the_stack_of_the_first_python_process_is_taken() -> None:
    run = runner(
        {1: done(1, err="Error: Failed to find python version from target process"), 2: done(0, DUMP)}
    )
    dump = dump_stacks([1, 2], Path("/venv/bin/py-spy"), run)  # type: ignore[arg-type]
    assert dump.pid == 2 and dump.lines[3] == 'Thread 4242 (idle): "MainThread"'
    assert dump.compact() == "hang_in_sleep (train.py:30) < main (train.py:150) < <module> (train.py:200)"


def test_permission_denied_is_said_and_not_retried_on_every_process() -> None:
    err = (
        "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'"
    )
    run = runner({1: done(1, err=err), 2: done(0, DUMP)})
    dump = dump_stacks([1, 2], Path("py-spy"), run)  # type: ignore[arg-type]
    assert dump.lines == () and dump.why_none is not None
    assert dump.why_none.startswith("permission denied reading process 1's stacks")
    assert run.calls == [1]  # type: ignore[attr-defined]


def test_no_py_spy_says_why_there_is_no_stack() -> None:
    dump = dump_stacks([1], None)
    assert dump.why_none is not None and "py-spy is not installed" in dump.why_none
    assert (
        StallFinding(judge(WARN, 1, 1, IDLE, CAN_RESTART), dump, ())
        .log_lines()[0]
        .startswith("no stack of the trainer: py-spy is not installed")
    )


def test_a_dump_that_hangs_or_cannot_run_is_said() -> None:
    slow = runner({1: subprocess.TimeoutExpired(["py-spy"], 20.0)})
    assert "took over 20s" in (dump_stacks([1], Path("py-spy"), slow).why_none or "")  # type: ignore[arg-type]
    broken = runner({1: PermissionError(13, "Permission denied")})
    why = dump_stacks([1], Path("py-spy"), broken).why_none or ""  # type: ignore[arg-type]
    assert why.startswith("py-spy could not be run")


def test_a_gone_trainer_has_no_stack() -> None:
    assert dump_stacks([], Path("py-spy")).why_none == "the trainer's process is gone"


def test_a_failed_dump_names_py_spy_s_first_line() -> None:
    assert (
        why_dump_failed(7, "\n  Error: No such process\nmore")
        == "py-spy could not read process 7: Error: No such process"
    )
    assert "permission denied" in why_dump_failed(7, "Error: Operation not permitted (os error 1)")


def test_py_spy_is_found_beside_the_interpreter_first(tmp_path: Path) -> None:
    beside = tmp_path / "venv" / "bin" / platform.console_script("py-spy")
    found = find_py_spy(str(tmp_path / "venv" / "bin" / "python"), exists=lambda path: path == beside)
    assert found == beside


def test_py_spy_absent_everywhere_is_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_py_spy(str(tmp_path / "python"), exists=lambda path: False) is None


def test_windows_names_the_executable_with_exe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    assert platform.console_script("py-spy") == "py-spy.exe"
    monkeypatch.setattr(sys, "platform", "linux")
    assert platform.console_script("py-spy") == "py-spy"


def test_gpu_use_counts_only_gpus_the_trainer_is_on() -> None:
    reading = GpuReading(
        gpus=(
            fake_gpu(0, processes=[(4242, 3000)], utilization=71),
            fake_gpu(1, processes=[(999, 3000)], utilization=100),
        )
    )
    assert gpu_busy(reading, {4242}) == (71, None)
    assert gpu_busy(reading, {1}) == (None, "the trainer is on no GPU that could be read")
    assert gpu_busy(GpuReading(error="NVIDIA driver not found"), {1}) == (None, "NVIDIA driver not found")
    silent = GpuReading(gpus=(fake_gpu(0, processes=[(1, 10)], utilization=None),))
    assert gpu_busy(silent, {1}) == (None, "its GPU reports no utilisation")


def test_the_evidence_carries_the_verdict_the_stack_and_the_last_line() -> None:
    stack = StackDump(lines=tuple(DUMP.splitlines()), pid=4242)
    finding = StallFinding(judge(RESTART, 130, 120, IDLE, CAN_RESTART), stack, ("hanging at step 7",))
    evidence = finding.evidence()
    assert evidence.startswith("no progress announced for 130s")
    assert "; stack (py-spy, pid 4242): hang_in_sleep (train.py:30) < main" in evidence
    assert evidence.endswith("; last line: hanging at step 7")
    assert finding.log_lines()[0] == "stacks of the trainer (py-spy dump --pid 4242):"
    assert finding.log_lines()[-1] == "  hanging at step 7"


def test_the_tree_s_cpu_time_grows_with_work_and_a_gone_tree_has_none() -> None:
    """The one reading of a real process here: this test's own.

    The kernel counts CPU time in clock ticks (10 ms here) and the reading is a float sum: 50 ms of
    work read as 39.99 ms once (CI with two CPU hogs). So 200 ms of work, and half of it asked."""
    tree = TreeCpu()
    before = tree.seconds(os.getpid(), 0.0)
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    after = tree.seconds(os.getpid(), 1.0)  # the members listed at 0.0 are read again
    assert before is not None and after is not None and after >= before + 0.1
    assert TreeCpu().seconds(2**22 + 12345, 0.0) is None
