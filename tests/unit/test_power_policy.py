"""The power rule and the relaunch gate (contract 7.3), pure: readings in, actions out."""

from __future__ import annotations

from arena_ls.agent.power import PowerAction, PowerRules, PowerWatch, power_spec
from arena_ls.agent.relaunch_gate import GateRules, MachineReading, describe_wait, relaunch_gate
from arena_ls.settings import parse_settings


def watch(**rules: object) -> PowerWatch:
    return PowerWatch(PowerRules(**rules))  # type: ignore[arg-type]


def test_stop_after_the_grace_on_battery() -> None:
    power = watch(on_battery="stop", grace_seconds=60)
    assert power.observe(0, True) is None
    assert power.observe(10, False) is PowerAction.UNPLUGGED
    assert power.observe(69.9, False) is None
    assert power.observe(70, False) is PowerAction.STOP
    assert power.observe(71, False) is None  # stopping: once


def test_power_back_within_the_grace_forgives_the_unplug() -> None:
    power = watch(on_battery="stop", grace_seconds=60)
    assert power.observe(0, False) is PowerAction.UNPLUGGED
    assert power.observe(30, True) is PowerAction.PLUGGED_BACK
    assert power.observe(59, False) is PowerAction.UNPLUGGED  # a new unplug: a new grace
    assert power.observe(100, False) is None
    assert power.observe(119, False) is PowerAction.STOP


def test_no_battery_or_an_unknown_source_counts_as_plugged_in() -> None:
    power = watch(on_battery="stop", grace_seconds=0)
    assert power.observe(0, None) is None
    assert power.observe(1000, None) is None


def test_warn_warns_once_per_unplug_and_never_stops() -> None:
    power = watch(on_battery="warn", grace_seconds=0)
    assert power.observe(0, False) is PowerAction.UNPLUGGED
    assert [power.observe(t, False) for t in range(1, 100)] == [None] * 99
    assert "goes on" in power.message(PowerAction.UNPLUGGED)


def test_ignore_does_nothing() -> None:
    power = watch(on_battery="ignore", grace_seconds=0)
    assert [power.observe(t, False) for t in range(10)] == [None] * 10


def test_resume_on_ac_once() -> None:
    power = watch(on_battery="stop", grace_seconds=0, resume_on_ac=True)
    power.observe(0, False)
    assert power.observe(0, False) is PowerAction.STOP
    assert power.resume_after_stop() is True
    assert power.observe(5, False) is PowerAction.UNPLUGGED  # watching again after the resume
    assert power.observe(5, False) is PowerAction.STOP
    assert power.resume_after_stop() is False  # the second battery stop ends the run
    assert not watch(resume_on_ac=False).resume_after_stop()


def test_the_messages_say_what_happens() -> None:
    power = watch(on_battery="stop", grace_seconds=60, resume_on_ac=True)
    assert "stops in 60s" in power.message(PowerAction.UNPLUGGED)
    assert "resuming, when power returns" in power.message(PowerAction.STOP)
    assert "stays stopped" in watch(resume_on_ac=False).message(PowerAction.STOP)


def test_the_spec_takes_the_settings_at_the_start() -> None:
    settings, problems = parse_settings(
        {
            "power": {"onBattery": "warn", "graceSeconds": 5, "resumeOnAc": False},
            "preflight": {"minFreeRamMb": 100, "requirePluggedIn": False},
        }
    )
    assert not problems
    spec = power_spec(settings)
    assert (spec.on_battery, spec.grace_seconds, spec.resume_on_ac) == ("warn", 5.0, False)
    assert (spec.require_plugged_in, spec.min_free_ram_mb) == (False, 100)
    default = power_spec(parse_settings({})[0])
    assert (default.on_battery, default.grace_seconds, default.resume_on_ac) == ("stop", 60.0, True)


def test_the_relaunch_gate_holds_on_battery_and_low_ram() -> None:
    rules = GateRules(require_plugged_in=True, min_free_ram_mb=5120)
    assert relaunch_gate(rules, MachineReading(plugged_in=True, available_ram_mb=8000)) == []
    failing = relaunch_gate(rules, MachineReading(plugged_in=False, available_ram_mb=1000))
    assert [c["name"] for c in failing] == ["power", "ram"] and not any(c["ok"] for c in failing)
    assert "1000 MB" in failing[1]["message"] and "5120 MB" in failing[1]["message"]
    assert describe_wait(failing).startswith("relaunch held by pre-flight: power:")


def test_the_relaunch_gate_passes_what_cannot_be_read_and_what_is_not_asked() -> None:
    assert relaunch_gate(GateRules(), MachineReading()) == []
    assert relaunch_gate(GateRules(require_plugged_in=False), MachineReading(plugged_in=False)) == []
    assert relaunch_gate(GateRules(min_free_ram_mb=0), MachineReading(available_ram_mb=0)) == []
