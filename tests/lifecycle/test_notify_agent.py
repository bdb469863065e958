"""The agent tells the person, with no editor open, each event once (contract 8.3; issue 37's "Done when").

Real job agents run real trainers; their desktop notifications go to a real
``dbus-daemon`` of the test's own (``DBUS_SESSION_BUS_ADDRESS``) where a small
``org.freedesktop.Notifications`` written with jeepney records them, and
``notify.command`` is a real script that appends what it reads on stdin to a
file. Each event (a run's end, each relaunch, a battery stop, a wait for the
pre-flight) reaches both once, with the fields the contract lists. A command
that fails or hangs never fails the run; one that hangs is killed (the
timeout injected, shorter than 10 s).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arena_ls.agent.notifier import CommandFailed, Notifier, run_command, told_keys
from arena_ls.platform_notify import (
    NotifyUnavailable,
    desktop_unavailable,
    freedesktop_notification,
    notify_desktop,
)
from arena_ls.run import agent_records
from arena_ls.run.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.run.rundir import NotifySpec, PowerSpec, RunSpec
from arena_ls.run.states import RunStatus
from tests.helpers.agent_runs import AgentRun
from tests.helpers.dbus import DBUS_DAEMON, DBusDaemon, FakeNotifications
from tests.helpers.fake_hardware import ENV_VAR, FakeHardware, write_fake_hardware
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.skipif(
    DBUS_DAEMON is None or not sys.platform.startswith("linux"),
    reason="needs dbus-daemon (scripts/test.sh installs it)",
)

RECORDER = """import json, sys
data = sys.stdin.read()
json.loads(data)  # one JSON object, or this command fails
with open(sys.argv[1], "a", encoding="utf-8") as out:
    out.write(data if data.endswith("\\n") else data + "\\n")
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if code:
    print("boom: the phone is off", file=sys.stderr)
sys.exit(code)
"""
FIELDS = {"event", "key", "runId", "jobId", "jobName", "status", "outcome", "step", "totalSteps", "loss",
          "lastCheckpoint", "restarts", "failure", "stoppedBy", "waitingFor", "question", "logPath", "at",
          "title", "message"}  # fmt: skip
"""docs/protocol.md's fields of a notification event."""


@pytest.fixture
def bus(tmp_path: Path) -> Iterator[DBusDaemon]:
    daemon = DBusDaemon(tmp_path)
    try:
        yield daemon
    finally:
        daemon.close()


@pytest.fixture
def server(bus: DBusDaemon) -> Iterator[FakeNotifications]:
    service = FakeNotifications(bus.address)
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def runs() -> Iterator[list[AgentRun]]:
    started: list[AgentRun] = []
    yield started
    for run in started:
        run.close()


class Recorder:
    """``notify.command``: a real script appending each event it reads to ``received``."""

    def __init__(self, folder: Path, exit_code: int = 0) -> None:
        script = folder / "recorder.py"
        script.write_text(RECORDER, encoding="utf-8")
        self.path = folder / "received.jsonl"
        self.argv = [sys.executable, str(script), str(self.path), str(exit_code)]

    def received(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines()]


def start(
    runs: list[AgentRun], root: Path, bus: DBusDaemon, recorder: Recorder, *args: str, **spec: Any
) -> AgentRun:
    env = {"DBUS_SESSION_BUS_ADDRESS": bus.address, **spec.pop("env", {})}
    notify = NotifySpec(desktop=True, command=recorder.argv)
    run = AgentRun(root, *args, env=env, notify=notify, **spec)
    runs.append(run)
    return run


def notified_keys(run: AgentRun) -> list[str]:
    return [line.text for line in _arena(run) if line.text.startswith("notified: ")]


def _arena(run: AgentRun) -> list[Any]:
    from arena_ls.run.capture_records import iter_all_lines

    return [line for line in iter_all_lines(run.run_dir.path) if line.stream == "arena"]


def wait_for_both(server: FakeNotifications, recorder: Recorder, count: int) -> list[dict[str, Any]]:
    wait_until(lambda: len(server.received()) >= count, f"{count} desktop notification(s)")
    return wait_until(
        lambda: (got := recorder.received()) and len(got) >= count and got, f"{count} command run(s)"
    )


def test_relaunches_and_the_end_reach_both_once_with_the_contracts_fields(
    tmp_path: Path, bus: DBusDaemon, server: FakeNotifications, runs: list[AgentRun]
) -> None:
    recorder = Recorder(tmp_path)
    run = start(
        runs, tmp_path, bus, recorder, "--steps", "12", "--ckpt-every", "2", "--crash-after-progress", "4",
        max_restarts=5,
    )  # fmt: skip
    state = run.ended()
    assert state.status is RunStatus.SUCCEEDED and state.restarts >= 2
    expected = [f"relaunched:{n}" for n in range(1, state.restarts + 1)] + ["ended"]
    received = wait_for_both(server, recorder, len(expected))
    assert [event["key"] for event in received] == expected, "each event once, in order"
    desktop = server.received()
    assert [note["summary"] for note in desktop] == [event["title"] for event in received]
    assert [note["body"] for note in desktop] == [event["message"] for event in received]
    assert all(note["app"] == "arena-ls" for note in desktop)
    for event in received:
        assert set(event) == FIELDS
        assert (event["jobId"], event["jobName"], event["runId"]) == ("lm", "Lm", run.run_dir.run_id)
        assert event["logPath"] == str(run.run_dir.log_path)
    end = received[-1]
    assert (end["event"], end["outcome"], end["status"], end["step"]) == (
        "ended",
        "succeeded",
        "succeeded",
        12,
    )
    assert end["lastCheckpoint"]["step"] == 12
    assert isinstance(end["loss"], float)
    assert (
        end["title"] == "Lm: succeeded"
        and "step 12" in end["message"]
        and "last checkpoint: step 12" in end["message"]
    )
    relaunch = received[0]
    assert (relaunch["event"], relaunch["outcome"], relaunch["restarts"]) == ("relaunched", "relaunched", 1)
    assert relaunch["lastCheckpoint"] is not None
    assert len(notified_keys(run)) == len(expected), "each recorded once in the run's log"
    assert len(server.received()) == len(expected) and len(recorder.received()) == len(expected)


def test_a_relaunch_held_by_the_pre_flight_waits_for_a_person_and_is_told(
    tmp_path: Path, bus: DBusDaemon, server: FakeNotifications, runs: list[AgentRun]
) -> None:
    recorder = Recorder(tmp_path)
    impossible = PowerSpec(require_plugged_in=False, min_free_ram_mb=2**40)
    run = start(
        runs, tmp_path, bus, recorder, "--steps", "100000", "--interval", "0.05", "--ckpt-every", "2",
        "--crash-at", "3", max_restarts=3, power=impossible,
    )  # fmt: skip
    [waiting] = wait_for_both(server, recorder, 1)
    assert (waiting["event"], waiting["key"], waiting["status"]) == ("waiting", "waiting:1:1", "restarting")
    assert [check["name"] for check in waiting["waitingFor"]] == ["ram"]
    assert waiting["question"] == "the relaunch waits until these checks pass: ram"
    run.run_dir.request_stop(kill=False, grace_seconds=30.0, by="the test")
    state = run.ended()
    assert state.status is RunStatus.STOPPED
    received = wait_for_both(server, recorder, 2)
    assert [event["key"] for event in received] == ["waiting:1:1", "ended"]
    assert received[1]["outcome"] == "stopped"


def test_a_battery_stop_is_told_once_then_the_end(
    tmp_path: Path, bus: DBusDaemon, server: FakeNotifications, runs: list[AgentRun]
) -> None:
    recorder = Recorder(tmp_path)
    machine = tmp_path / "machine.json"
    write_fake_hardware(machine, {"battery": {"percent": 80, "pluggedIn": True}})
    hardware = {
        "ARENA_AGENT_HARDWARE": FakeHardware.agent_factory[0],
        "ARENA_AGENT_HARDWARE_PATH": FakeHardware.agent_factory[1],
        ENV_VAR: str(machine),
    }
    power = PowerSpec(on_battery="stop", grace_seconds=0.0, resume_on_ac=True, min_free_ram_mb=0)
    run = start(
        runs, tmp_path, bus, recorder, "--steps", "100000", "--interval", "0.05", "--ckpt-every", "2",
        power=power, env=hardware,
    )  # fmt: skip
    wait_until(lambda: (run.state() and run.state().last_checkpoint) is not None, "a checkpoint")  # type: ignore[union-attr]
    write_fake_hardware(machine, {"battery": {"percent": 80, "pluggedIn": False}})
    [stop] = wait_for_both(server, recorder, 1)
    assert (stop["event"], stop["key"], stop["stoppedBy"], stop["outcome"]) == (
        "battery-stop", "battery-stop:1", "battery", "stopped for battery",
    )  # fmt: skip
    assert stop["question"] == "plug the machine in: the run resumes when power returns"
    write_fake_hardware(machine, {"battery": {"percent": 80, "pluggedIn": True}})
    run.wait_status(RunStatus.RUNNING)
    run.run_dir.request_stop(kill=False, grace_seconds=30.0, by="the test")
    run.ended()
    received = wait_for_both(server, recorder, 2)
    assert [event["key"] for event in received] == ["battery-stop:1", "ended"]


def test_a_failing_command_never_fails_the_run_and_is_said_once(
    tmp_path: Path, bus: DBusDaemon, server: FakeNotifications, runs: list[AgentRun]
) -> None:
    recorder = Recorder(tmp_path, exit_code=3)
    run = start(
        runs, tmp_path, bus, recorder, "--steps", "8", "--ckpt-every", "2", "--crash-after-progress", "4",
        max_restarts=3,
    )  # fmt: skip
    state = run.ended()
    assert state.status is RunStatus.SUCCEEDED
    received = wait_for_both(server, recorder, 2)
    assert received[-1]["key"] == "ended", "the command ran for every event, failing each time"
    failures = [line.text for line in _arena(run) if line.text.startswith("notify.command failed")]
    assert len(failures) == 1, failures
    assert "exited with status 3: boom: the phone is off" in failures[0]


def test_no_notification_server_is_said_and_the_command_still_runs(
    tmp_path: Path, bus: DBusDaemon, runs: list[AgentRun]
) -> None:
    recorder = Recorder(tmp_path)
    run = start(runs, tmp_path, bus, recorder, "--steps", "3")
    assert run.ended().status is RunStatus.SUCCEEDED
    [event] = wait_until(recorder.received, "the command's event")
    assert event["key"] == "ended"
    [said] = [line.text for line in _arena(run) if line.text.startswith("desktop notification failed")]
    assert "org.freedesktop.Notifications" in said


# -- the pieces, against the real bus and real processes ------------------------------------------


def test_the_desktop_path_escapes_markup_only_for_a_server_that_reads_it(bus: DBusDaemon) -> None:
    plain = FakeNotifications(bus.address)
    try:
        freedesktop_notification("a <b>", "x & <i>y</i>", bus=bus.address)
        assert plain.received()[0]["body"] == "x & <i>y</i>"
    finally:
        plain.close()
    markup = FakeNotifications(bus.address, ("body", "body-markup"))
    try:
        freedesktop_notification("a <b>", "x & <i>y</i>", bus=bus.address)
        assert markup.received()[0]["body"] == "x &amp; &lt;i&gt;y&lt;/i&gt;"
        assert markup.received()[0]["summary"] == "a <b>"
    finally:
        markup.close()


def test_without_a_session_bus_the_desktop_path_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    with pytest.raises(NotifyUnavailable, match="no session bus"):
        notify_desktop("t", "b")
    assert desktop_unavailable() == "no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
    assert desktop_unavailable({"DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus"}) is None


def test_a_machine_without_a_session_bus_is_said_once_at_the_start_not_at_every_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (merge of 37a): headless Linux ended every run's log with "desktop notification
    failed: no session bus", after the run's own last line (verify-gates.sh's gate 7 read it)."""
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    told: list[str] = []
    spec = RunSpec(run_id="r-1", job_id="j", job_name="J", kind="train", argv=["x"], cwd=str(tmp_path))
    notifier = Notifier(spec, NotifySpec(desktop=True, command=None), tmp_path / "out.log",
                        lambda event: told.append(event.render()))  # fmt: skip
    try:
        notifier.observe({"runId": "r-1", "status": "running", "step": 1})
        notifier.observe({"runId": "r-1", "status": "succeeded", "step": 2})
    finally:
        assert notifier.close(10)
    off = [text for text in told if "desktop notifications are off" in text]
    assert off == [
        "desktop notifications are off on this machine: no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
    ]
    assert told.index(off[0]) == 0
    assert not [text for text in told if "failed" in text], told


def test_a_hanging_command_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hang = f"sleep 600 & echo $! > {pids}.partial; echo $$ >> {pids}.partial; mv {pids}.partial {pids}; wait"
    with pytest.raises(CommandFailed, match=r"did not finish in 1s: killed"):
        run_command(["/bin/sh", "-c", hang], {"event": "ended"}, timeout=1.0)
    if pids.exists():  # it got as far as starting its child before the timeout
        for pid in map(int, pids.read_text().split()):
            wait_until(lambda pid=pid: _gone(pid), f"process {pid} killed")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_missing_command_is_a_failure_with_its_reason(tmp_path: Path) -> None:
    with pytest.raises(CommandFailed, match="cannot run"):
        run_command([str(tmp_path / "no-such-program")], {"event": "ended"}, timeout=5.0)


def test_a_command_that_reads_nothing_is_fine(tmp_path: Path) -> None:
    assert run_command([sys.executable, "-c", "pass"], {"event": "ended", "big": "x" * 1_000_000}, 30.0)


def spec() -> RunSpec:
    return RunSpec(run_id="r", job_id="lm", job_name="Lm", kind="train", argv=["x"], cwd=".")


def test_a_new_agent_on_the_same_run_never_tells_again_and_a_trainer_cannot_forge_the_record(
    tmp_path: Path,
) -> None:
    writer = OutputWriter(tmp_path)
    forged = agent_records.notified("relaunched:1", "forged").encode()
    writer.append(STDOUT, (forged + "\n").encode())  # the trainer prints a record's words
    sent: list[str] = []
    first = Notifier(spec(), NotifySpec(), tmp_path / "output.log",
                     lambda e: writer.append_line(ARENA, e.encode()),
                     desktop=lambda title, body: sent.append(title) or "fake")  # fmt: skip
    first.observe({"status": "running", "restarts": 1})
    first.observe({"status": "crashed", "restarts": 1})
    assert first.close(30)
    assert sent == ["Lm: relaunched", "Lm: crashed"], "the trainer's line silenced nothing"
    assert told_keys(tmp_path) == ["relaunched:1", "ended"]
    again = Notifier(spec(), NotifySpec(), tmp_path / "output.log", lambda e: None, told=told_keys(tmp_path),
                     desktop=lambda title, body: sent.append(title) or "fake")  # fmt: skip
    again.observe({"status": "crashed", "restarts": 1})
    assert again.close(30)
    assert sent == ["Lm: relaunched", "Lm: crashed"]
    writer.close()


def test_a_slow_channel_never_holds_up_the_state_writer() -> None:
    release = threading.Event()
    told: list[str] = []
    notifier = Notifier(
        spec(), NotifySpec(), Path("output.log"), lambda e: told.append(e.render()),
        desktop=lambda title, body: "shown" if release.wait(60) else "late",
    )  # fmt: skip
    notifier.observe({"status": "succeeded"})  # returns at once: the sending waits on its own thread
    assert told == ["notified: Lm: succeeded: no checkpoint yet"]
    release.set()
    assert notifier.close(30)
