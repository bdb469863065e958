"""Which happenings of a run are told, each once (contract 8.3): ``NotifyTracker`` on recorded states.

The states are what the agent writes (``state.json``'s camelCase payload),
written again and again as a real agent does (every progress line is a
write): an event is told at its first state and never again, not even by a
tracker built from the keys a run's log already holds.
"""

from __future__ import annotations

from typing import Any

from arena_ls.agent.notify_events import NotifyTracker, notify_spec
from arena_ls.run.states import RunStatus
from arena_ls.settings import parse_settings

CHECKPOINT = {"step": 40, "path": "ckpt-40.pt", "at": 1.0}


def state(status: str, **fields: Any) -> dict[str, Any]:
    return {"runId": "r", "jobId": "lm", "status": status, "restarts": 0, "step": 45, "loss": 1.5,
            "lastCheckpoint": CHECKPOINT, **fields}  # fmt: skip


def tracker(*told: str) -> NotifyTracker:
    return NotifyTracker("r", "Tiny LM", "/runs/r/output.log", set(told))


def keys(tracker: NotifyTracker, *states: dict[str, Any]) -> list[str]:
    return [event.key for each in states for event in tracker.observe(each)]


def test_a_run_that_only_runs_tells_nothing() -> None:
    assert keys(tracker(), state("starting"), state("running"), state("running", step=46)) == []


def test_the_end_is_told_once_with_the_fields_the_contract_lists() -> None:
    watch = tracker()
    [event] = watch.observe(state("succeeded", totalSteps=100))
    assert watch.observe(state("succeeded")) == [], "the final state written again tells nothing"
    payload = event.payload
    assert payload["event"] == "ended" and payload["key"] == "ended"
    assert (payload["jobId"], payload["jobName"], payload["runId"]) == ("lm", "Tiny LM", "r")
    assert (payload["outcome"], payload["step"], payload["totalSteps"], payload["loss"]) == (
        "succeeded",
        45,
        100,
        1.5,
    )
    assert payload["lastCheckpoint"] == {"step": 40, "path": "ckpt-40.pt"}
    assert payload["logPath"] == "/runs/r/output.log"
    assert event.title == "Tiny LM: succeeded"
    assert event.message == "step 45/100, loss 1.5, last checkpoint: step 40"


def test_each_relaunch_is_told_once_when_it_runs() -> None:
    watch = tracker()
    told = keys(
        watch,
        state("running"), state("restarting", restarts=1), state("running", restarts=1),
        state("running", restarts=1, step=50), state("restarting", restarts=2), state("running", restarts=2),
    )  # fmt: skip
    assert told == ["relaunched:1", "relaunched:2"]


def test_a_crash_for_good_asks_the_person_what_to_do() -> None:
    failure = {"kind": "resume-refused", "evidence": "error: checkpoint is at step 600, not 50"}
    [event] = tracker().observe(state("crashed", failure=failure, lastCheckpoint=None))
    assert event.payload["failure"] == failure
    assert event.payload["question"].startswith("the trainer refused to resume")
    assert "no checkpoint yet" in event.message and "failure: resume-refused" in event.message


def test_a_wait_for_the_pre_flight_is_told_once_per_wait() -> None:
    ram = [{"name": "ram", "message": "2 GB free, 5 GB needed"}]
    watch = tracker()
    told = keys(
        watch,
        state("restarting", restarts=1, waitingFor=ram), state("restarting", restarts=1, waitingFor=ram),
        state("restarting", restarts=1), state("restarting", restarts=1, waitingFor=ram),
    )  # fmt: skip
    assert told == ["waiting:1:1", "waiting:1:2"], "a second wait of the same relaunch is a new event"
    [event] = tracker().observe(state("restarting", restarts=1, waitingFor=ram))
    assert event.payload["waitingFor"] == ram
    assert event.payload["question"] == "the relaunch waits until these checks pass: ram"


def test_a_battery_stop_is_told_once_and_its_wait_for_power_is_part_of_it() -> None:
    power = [{"name": "power", "message": "on battery"}]
    battery = {"stoppedBy": "battery", "waitingFor": power}
    watch = tracker()
    told = keys(watch, state("stopping"), state("restarting", **battery), state("restarting", **battery))
    assert told == ["battery-stop:1"]
    assert keys(watch, state("running"), state("stopping"), state("stopped", stoppedBy="battery")) == [
        "ended"
    ]


def test_a_battery_stop_that_ends_the_run_says_so() -> None:
    [event] = tracker().observe(state("stopped", stoppedBy="battery"))
    assert (event.key, event.payload["outcome"]) == ("ended", "stopped for battery")


def test_keys_the_log_holds_are_never_told_again() -> None:
    watch = tracker("ended", "relaunched:1")
    assert keys(watch, state("running", restarts=1), state("crashed", restarts=1)) == []


def test_a_nan_loss_and_garbage_fields_do_not_break_the_event() -> None:
    [event] = tracker().observe(
        state("crashed", loss=float("nan"), step="x", lastCheckpoint="?", failure=None, restarts=True)
    )
    payload = event.payload
    assert (payload["loss"], payload["step"], payload["lastCheckpoint"], payload["restarts"]) == (
        None,
        None,
        None,
        0,
    )


def test_the_spec_follows_the_settings() -> None:
    settings, problems = parse_settings({"notify": {"desktop": False, "command": ["notify-me", "--json"]}})
    assert problems == []
    spec = notify_spec(settings)
    assert (spec.desktop, spec.command) == (False, ["notify-me", "--json"])
    default, _ = parse_settings({})
    assert (notify_spec(default).desktop, notify_spec(default).command) == (True, None)


def test_a_shell_string_is_not_a_command() -> None:
    _, problems = parse_settings({"notify": {"command": "notify-me --json; rm -rf ~"}})
    assert problems and "notify.command" in problems[0]


def test_the_agents_own_payload_with_its_status_enum_reads_as_words() -> None:
    """The writer's payload holds the ``RunStatus`` itself; the event has the word (a test found it)."""
    [event] = tracker().observe(state(RunStatus.STOPPED))  # type: ignore[arg-type]
    assert (event.payload["status"], event.payload["outcome"], event.title) == (
        "stopped",
        "stopped",
        "Tiny LM: stopped",
    )


def test_a_relaunch_no_written_state_showed_running_is_still_told_before_the_end() -> None:
    """A busy machine folds writes together: ``restarting`` (1) then ``crashed`` with 2 relaunches."""
    watch = tracker()
    assert keys(watch, state("restarting", restarts=1), state("restarting", restarts=2)) == ["relaunched:1"]
    assert keys(watch, state("succeeded", restarts=2)) == ["relaunched:2", "ended"]


def test_a_relaunch_stopped_in_its_backoff_is_not_told_as_run() -> None:
    watch = tracker()
    assert keys(watch, state("restarting", restarts=1), state("stopped", restarts=1)) == ["ended"]


def test_an_empty_list_is_no_command() -> None:
    settings, problems = parse_settings({"notify": {"command": []}})
    assert problems == [] and notify_spec(settings).command is None
    _, problems = parse_settings({"notify": {"command": ["notify-me", ""]}})
    assert problems, "an empty argument is a mistake, not a command"
