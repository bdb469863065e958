"""Keep-awake on Windows and macOS, their calls faked (contract 8.3), and the agent's side of it.

Windows: ``SetThreadExecutionState`` is set with ``ES_CONTINUOUS |
ES_SYSTEM_REQUIRED`` and cleared with ``ES_CONTINUOUS`` on one thread of the
hold's own, never the caller's (the state belongs to the thread that set it);
a NULL answer is a refusal. macOS: ``caffeinate -i -w PID`` as an argument
list, ended at the release. The agent records ``keepAwake`` true, false or
null (with the reason in the log) and the run goes on whatever happens.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from arena_ls import platform_awake
from arena_ls.agent.keep_awake import KeepAwake
from arena_ls.platform_awake import (
    ES_CONTINUOUS,
    ES_SYSTEM_REQUIRED,
    AwakeUnavailable,
    CaffeinateHold,
    ExecutionStateHold,
)
from arena_ls.run.rundir import PowerSpec, RunSpec, RunState


class ExecutionState:
    """A fake ``SetThreadExecutionState``: each call's flags and the thread that made it."""

    def __init__(self, answer: int = ES_CONTINUOUS) -> None:
        self.calls: list[tuple[int, int]] = []
        self.answer = answer
        self.cleared = threading.Event()

    def __call__(self, flags: int) -> int:
        self.calls.append((flags, threading.get_ident()))
        if flags == ES_CONTINUOUS:
            self.cleared.set()
        return self.answer


def test_windows_sets_and_clears_the_execution_state_on_one_thread_of_its_own() -> None:
    api = ExecutionState()
    hold = ExecutionStateHold(api)
    [(flags, setter)] = api.calls
    assert flags == ES_CONTINUOUS | ES_SYSTEM_REQUIRED == 0x80000001
    assert setter != threading.get_ident(), "not the caller's thread: it may end or be reused"
    assert not api.cleared.is_set(), "held until released"
    hold.release()
    assert api.cleared.is_set()
    assert api.calls[1] == (ES_CONTINUOUS, setter), "cleared on the thread that set it"
    hold.release()
    assert len(api.calls) == 2, "a second release does nothing"


def test_windows_null_answer_is_a_refusal_with_its_reason() -> None:
    with pytest.raises(AwakeUnavailable, match="returned NULL"):
        ExecutionStateHold(ExecutionState(answer=0))


def test_windows_a_failing_call_is_a_refusal_not_a_crash() -> None:
    def broken(flags: int) -> int:
        raise OSError("kernel32 missing")

    with pytest.raises(AwakeUnavailable, match="kernel32 missing"):
        ExecutionStateHold(broken)


def test_windows_is_chosen_on_win32(monkeypatch: pytest.MonkeyPatch) -> None:
    api = ExecutionState()
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(platform_awake, "load_set_thread_execution_state", lambda: api)
    hold = platform_awake.hold_awake("arena-ls", "training")
    assert isinstance(hold, ExecutionStateHold)
    hold.release()
    assert [flags for flags, _ in api.calls] == [0x80000001, ES_CONTINUOUS]


class FakeProcess:
    def __init__(self, argv: Sequence[str]) -> None:
        self.argv = list(argv)
        self.terminated = False

    def terminate(self) -> None:
        self.terminated = True

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def kill(self) -> None:
        raise AssertionError("terminate was enough")


def test_macos_runs_caffeinate_for_the_agent_as_an_argument_list_and_ends_it() -> None:
    started: list[FakeProcess] = []

    def spawn(argv: Sequence[str]) -> Any:
        started.append(FakeProcess(argv))
        return started[-1]

    hold = CaffeinateHold(4242, spawn=spawn)
    [process] = started
    assert process.argv == ["/usr/bin/caffeinate", "-i", "-w", "4242"]
    assert not process.terminated
    hold.release()
    hold.release()
    assert process.terminated


def test_macos_without_caffeinate_is_a_refusal() -> None:
    def spawn(argv: Sequence[str]) -> subprocess.Popen[bytes]:
        raise FileNotFoundError(2, "No such file", argv[0])

    with pytest.raises(AwakeUnavailable, match="cannot start caffeinate"):
        CaffeinateHold(1, spawn=spawn)


def test_macos_is_chosen_on_darwin_with_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(platform_awake, "CaffeinateHold", lambda pid: seen.append(pid) or "hold")
    assert platform_awake.hold_awake("arena-ls", "training", pid=77) == "hold"
    assert seen == [77]


# -- the agent's side ----------------------------------------------------------------------------


class Hold:
    how = "a fake hold"

    def __init__(self) -> None:
        self.released = 0

    def release(self) -> None:
        self.released += 1


def spec(kind: str = "train", power: PowerSpec | None = None) -> RunSpec:
    return RunSpec(run_id="r", job_id="lm", job_name="Lm", kind=kind, argv=["x"], cwd=".", power=power)


def take(keep: KeepAwake) -> tuple[RunState, list[str]]:
    state, said = RunState(run_id="r", job_id="lm"), []
    keep.take(state, threading.RLock(), said.append)
    return state, said


def test_the_agent_holds_for_a_train_run_of_this_machine_and_releases_once() -> None:
    holds: list[Hold] = []
    keep = KeepAwake(spec(power=PowerSpec()), hold=lambda who, why: holds.append(Hold()) or holds[-1])
    state, said = take(keep)
    assert state.keep_awake is True
    assert said == ["keeping the machine awake while the run trains (a fake hold)"]
    keep.release()
    keep.release()
    assert holds[0].released == 1


@pytest.mark.parametrize(
    "run", [spec(power=PowerSpec(keep_awake=False)), spec(kind="task", power=None), spec(power=None)],
    ids=["setting off", "not a train run", "a cluster run (no power spec)"],
)  # fmt: skip
def test_the_agent_holds_nothing_when_it_should_not(run: RunSpec) -> None:
    def never(who: str, why: str) -> Hold:
        raise AssertionError("asked")

    state, said = take(KeepAwake(run, hold=never))
    assert (state.keep_awake, said) == (False, [])


def test_a_platform_that_refuses_leaves_keep_awake_null_with_the_reason() -> None:
    def refuse(who: str, why: str) -> Hold:
        raise AwakeUnavailable("cannot reach the system bus: no such file")

    keep = KeepAwake(spec(power=PowerSpec()), hold=refuse)
    state, said = take(keep)
    assert state.keep_awake is None
    assert said == [
        "the machine cannot be kept awake during this run: cannot reach the system bus: no such file"
    ]
    keep.release()  # nothing held: nothing to do


def test_an_unexpected_failure_of_the_platform_never_fails_the_run() -> None:
    def broken(who: str, why: str) -> Hold:
        raise RuntimeError("surprise")

    state, said = take(KeepAwake(spec(power=PowerSpec()), hold=broken))
    assert state.keep_awake is None and "surprise" in said[0]
