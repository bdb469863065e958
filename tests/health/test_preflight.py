"""Pre-flight checks, with the fake machine for GPUs and battery and the real one for the rest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import attrs
import psutil
import pytest

from arena_ls import platform
from arena_ls.health import Check, SystemHardware, check_to_wire, run_preflight
from arena_ls.health.model import BatteryInfo
from arena_ls.health.preflight import (
    check_disk,
    check_gates,
    check_gpu_contention,
    check_power,
    check_ram,
    check_state_dir,
    wait_gpu_released,
)
from arena_ls.settings import PreflightSettings

from .support import FakeHardware, fake_gpu

DEFAULTS = PreflightSettings()


def a_gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {check.name: check for check in checks}


def preflight(
    hw: FakeHardware | SystemHardware,
    tmp_path: Path,
    *,
    kind: str = "train",
    settings: PreflightSettings = DEFAULTS,
    our_pids: frozenset[int] = frozenset(),
    gate_errors: list[str] | None = None,
) -> tuple[list[Check], list[str]]:
    return run_preflight(
        kind=kind,  # type: ignore[arg-type]
        hw=hw,
        settings=settings,
        checkpoint_dir=tmp_path / "checkpoints",
        state_dir=tmp_path / ".aide" / "training",
        our_pids=set(our_pids),
        gate_errors=gate_errors,
    )


# --- gpu-contention -----------------------------------------------------------------------


def test_foreign_gpu_process_fails_naming_pid_name_and_memory() -> None:
    foreign = os.getpid()  # a live process, so its name is readable; not in our_pids
    reading = FakeHardware(gpu_list=[fake_gpu(0, processes=[(foreign, 3120)])]).gpus()

    check, warnings = check_gpu_contention(reading, DEFAULTS, our_pids=set())

    assert not check.ok
    assert check.name == "gpu-contention"
    assert f"pid {foreign}" in check.message
    assert f"({psutil.Process(foreign).name()})" in check.message
    assert "3120 MB" in check.message
    assert "GPU 0" in check.message
    assert "gpuContention" in check.message
    assert warnings == []


def test_foreign_process_that_is_gone_is_still_named_by_pid() -> None:
    gone = a_gone_pid()
    reading = FakeHardware(gpu_list=[fake_gpu(1, processes=[(gone, 512)])]).gpus()

    check, _ = check_gpu_contention(reading, DEFAULTS, our_pids=set())

    assert not check.ok
    assert f"GPU 1: pid {gone} holds 512 MB" in check.message


def test_foreign_process_with_unknown_memory_says_so() -> None:
    reading = FakeHardware(gpu_list=[fake_gpu(0, processes=[(a_gone_pid(), None)])]).gpus()

    check, _ = check_gpu_contention(reading, DEFAULTS, our_pids=set())

    assert not check.ok
    assert "unknown amount of memory" in check.message


def test_warn_mode_passes_with_a_warning_line() -> None:
    pid = a_gone_pid()
    reading = FakeHardware(gpu_list=[fake_gpu(0, processes=[(pid, 2048)])]).gpus()
    settings = attrs.evolve(DEFAULTS, gpu_contention="warn")

    check, warnings = check_gpu_contention(reading, settings, our_pids=set())

    assert check.ok
    assert len(warnings) == 1
    assert f"pid {pid}" in warnings[0]
    assert "2048 MB" in warnings[0]


def test_off_mode_does_not_look() -> None:
    reading = FakeHardware(gpu_list=[fake_gpu(0, processes=[(a_gone_pid(), 2048)])]).gpus()
    settings = attrs.evolve(DEFAULTS, gpu_contention="off")

    check, warnings = check_gpu_contention(reading, settings, our_pids=set())

    assert check.ok
    assert check.message.startswith("not checked")
    assert warnings == []


def test_our_own_process_on_the_gpu_passes() -> None:
    reading = FakeHardware(gpu_list=[fake_gpu(0, processes=[(4242, 6000)])]).gpus()

    check, warnings = check_gpu_contention(reading, DEFAULTS, our_pids={4242, 4243})

    assert check.ok
    assert "no foreign process on 1 GPU(s)" in check.message
    assert warnings == []


def test_one_foreign_among_ours_on_a_second_gpu_fails() -> None:
    gone = a_gone_pid()
    gpus = [fake_gpu(0, processes=[(4242, 6000)]), fake_gpu(1, processes=[(gone, 100)])]

    check, _ = check_gpu_contention(FakeHardware(gpu_list=gpus).gpus(), DEFAULTS, {4242})

    assert not check.ok
    assert f"GPU 1: pid {gone}" in check.message
    assert "4242" not in check.message


def test_no_gpu_passes_with_the_reason() -> None:
    reading = FakeHardware(gpu_error="NVIDIA driver not found (NVML: x)").gpus()

    check, _ = check_gpu_contention(reading, DEFAULTS, set())

    assert check.ok
    assert "NVIDIA driver not found (NVML: x)" in check.message


def test_incomplete_reading_is_mentioned() -> None:
    reading = FakeHardware(gpu_list=[fake_gpu(0)], gpu_error="GPU 1 could not be read").gpus()

    check, _ = check_gpu_contention(reading, DEFAULTS, set())

    assert check.ok
    assert "GPU reading incomplete: GPU 1 could not be read" in check.message


# --- power --------------------------------------------------------------------------------


def test_on_battery_fails_with_the_level_and_the_setting() -> None:
    hw = FakeHardware(battery_info=BatteryInfo(percent=57.0, plugged_in=False))

    check = check_power(hw, DEFAULTS)

    assert not check.ok
    assert check.message == ("on battery (57%); plug in or set arena.preflight.requirePluggedIn to false")


def test_on_battery_passes_when_the_setting_allows_it() -> None:
    hw = FakeHardware(battery_info=BatteryInfo(percent=57.0, plugged_in=False))

    check = check_power(hw, attrs.evolve(DEFAULTS, require_plugged_in=False))

    assert check.ok
    assert "57%" in check.message


def test_plugged_in_passes() -> None:
    hw = FakeHardware(battery_info=BatteryInfo(percent=80.0, plugged_in=True))

    check = check_power(hw, DEFAULTS)

    assert check.ok
    assert check.message == "plugged in (battery 80%)"


def test_no_battery_passes() -> None:
    check = check_power(FakeHardware(battery_info=None), DEFAULTS)

    assert check == Check("power", True, "no battery (mains power)")


def test_unknown_power_source_passes() -> None:
    hw = FakeHardware(battery_info=BatteryInfo(percent=40.0, plugged_in=None))

    check = check_power(hw, DEFAULTS)

    assert check.ok
    assert "unknown" in check.message


# --- ram and disk on the real machine -----------------------------------------------------


def numbers_in(message: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", message)]


def test_ram_fails_when_the_minimum_is_above_what_is_available() -> None:
    hw = SystemHardware()
    need = hw.ram().total_mb + 1_000_000

    check = check_ram(hw, attrs.evolve(DEFAULTS, min_free_ram_mb=need))

    assert not check.ok
    assert f"need {need} MB" in check.message
    available = numbers_in(check.message)[0]
    assert 0 <= available < need
    assert "minFreeRamMb" in check.message


def test_ram_passes_when_the_minimum_is_zero() -> None:
    check = check_ram(SystemHardware(), attrs.evolve(DEFAULTS, min_free_ram_mb=0))

    assert check.ok
    assert "need 0 MB" in check.message


def test_disk_fails_with_a_huge_minimum(tmp_path: Path) -> None:
    target = tmp_path / "checkpoints" / "not-yet"
    need = 10**12

    check = check_disk(SystemHardware(), attrs.evolve(DEFAULTS, min_free_disk_mb=need), target)

    assert not check.ok
    assert f"need {need} MB" in check.message
    assert str(target) in check.message
    free = numbers_in(check.message.split(" free at ")[0])[0]
    assert free < need


def test_disk_passes_with_a_zero_minimum(tmp_path: Path) -> None:
    check = check_disk(SystemHardware(), attrs.evolve(DEFAULTS, min_free_disk_mb=0), tmp_path)

    assert check.ok
    assert "need 0 MB" in check.message


# --- state-dir and gates ------------------------------------------------------------------


def test_state_dir_is_created_and_left_clean(tmp_path: Path) -> None:
    state = tmp_path / "deep" / ".aide" / "training"

    check = check_state_dir(state)

    assert check.ok
    assert state.is_dir()
    assert [p.name for p in state.iterdir()] == [".gitignore"], "only git's ignore file is left"
    assert (state / ".gitignore").read_text().splitlines()[-1] == "*"


def test_an_existing_state_dir_gets_no_gitignore(tmp_path: Path) -> None:
    state = tmp_path / "mine"
    state.mkdir()

    assert check_state_dir(state).ok
    assert list(state.iterdir()) == []


def test_state_dir_under_a_file_fails(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    check = check_state_dir(blocker / "training")

    assert not check.ok
    assert check.name == "state-dir"
    assert str(blocker / "training") in check.message


def test_gates() -> None:
    assert check_gates(None) == Check("gates", True, "not a train job")
    assert check_gates([]).ok
    failed = check_gates(["AR001 no OOM retry", "AR004 no checkpoint save"])
    assert not failed.ok
    assert "2 gate error(s)" in failed.message
    assert "AR001 no OOM retry; AR004 no checkpoint save" in failed.message


# --- run_preflight --------------------------------------------------------------------------


def test_train_runs_every_check_in_order(tmp_path: Path) -> None:
    checks, warnings = preflight(FakeHardware(), tmp_path, gate_errors=[])

    assert [c.name for c in checks] == [
        "power",
        "ram",
        "gpu-contention",
        "disk",
        "state-dir",
        "gates",
    ]
    assert all(c.ok for c in checks), checks
    assert warnings == []


def test_task_runs_only_state_dir_and_disk(tmp_path: Path) -> None:
    hw = FakeHardware(
        battery_info=BatteryInfo(10.0, False),
        ram_available_mb=1,
        gpu_list=[fake_gpu(0, processes=[(a_gone_pid(), 100)])],
    )

    checks, warnings = preflight(hw, tmp_path, kind="task")

    assert [c.name for c in checks] == ["state-dir", "disk"]
    assert all(c.ok for c in checks)
    assert warnings == []


def test_every_failure_is_reported_at_once(tmp_path: Path) -> None:
    hw = FakeHardware(
        battery_info=BatteryInfo(57.0, False),
        ram_available_mb=100,
        disk_free=10,
        gpu_list=[fake_gpu(0, processes=[(a_gone_pid(), 3000)])],
    )

    checks, _ = preflight(hw, tmp_path, gate_errors=["AR007 no --resume option"])

    failed = {c.name for c in checks if not c.ok}
    assert failed == {"power", "ram", "gpu-contention", "disk", "gates"}
    assert "only 100 MB of RAM available, need 5120 MB" in by_name(checks)["ram"].message
    assert "only 10 MB free" in by_name(checks)["disk"].message


def test_warn_mode_returns_the_warning_from_run_preflight(tmp_path: Path) -> None:
    pid = a_gone_pid()
    hw = FakeHardware(gpu_list=[fake_gpu(0, processes=[(pid, 700)])])
    settings = attrs.evolve(DEFAULTS, gpu_contention="warn")

    checks, warnings = preflight(hw, tmp_path, settings=settings)

    assert all(c.ok for c in checks)
    assert len(warnings) == 1
    assert f"pid {pid}" in warnings[0]


def test_check_to_wire() -> None:
    wire = check_to_wire(Check("ram", False, "only 1 MB"))

    assert wire == {"name": "ram", "ok": False, "message": "only 1 MB"}


# --- wait_gpu_released ----------------------------------------------------------------------


class ReleasingHardware(FakeHardware):
    """Lists our process on the GPU for the first few readings, then no longer."""

    def __init__(self, held_for: int) -> None:
        super().__init__(gpu_list=[fake_gpu(0, processes=[(4242, 900)])])
        self.readings_left = held_for

    def gpus(self):  # type: ignore[no-untyped-def]
        reading = super().gpus()
        if self.readings_left <= 0:
            return attrs.evolve(reading, gpus=(fake_gpu(0),))
        self.readings_left -= 1
        return reading


def test_wait_gpu_released_returns_empty_once_memory_is_freed() -> None:
    hw = ReleasingHardware(held_for=3)

    held = wait_gpu_released(hw, {4242}, timeout_s=60.0, poll_s=0.001)

    assert held == []
    assert hw.readings_left == 0


def test_wait_gpu_released_reports_what_is_still_held_at_the_deadline() -> None:
    hw = FakeHardware(gpu_list=[fake_gpu(0, processes=[(4242, 900), (7, 50)])])

    held = wait_gpu_released(hw, {4242}, timeout_s=0.05, poll_s=0.01)

    assert held == [(4242, 900)]


def test_wait_gpu_released_without_gpus_returns_at_once() -> None:
    hw = FakeHardware(gpu_error="NVIDIA driver not found")

    assert wait_gpu_released(hw, {4242}, timeout_s=3600.0) == []


@pytest.mark.parametrize("memory", [None, 0])
def test_unknown_memory_counts_as_held(memory: int | None) -> None:
    hw = FakeHardware(gpu_list=[fake_gpu(0, processes=[(4242, memory)])])

    assert wait_gpu_released(hw, {4242}, timeout_s=0.0) == [(4242, 0)]


class _TwoDisks(SystemHardware):
    """The checkpoints' disk has room; the state folder's is full."""

    def __init__(self, full: Path) -> None:
        super().__init__()
        self.full = full

    def disk_free_mb(self, path: Path) -> int:
        return 0 if path == self.full else 10**6


def test_disk_covers_the_state_folder_as_well_as_the_checkpoints(tmp_path: Path) -> None:
    state = tmp_path / "state"
    settings = attrs.evolve(DEFAULTS, min_free_disk_mb=10)

    check = check_disk(_TwoDisks(state), settings, tmp_path / "ckpt", state)

    assert not check.ok
    assert f"only 0 MB free at {state}" in check.message
    assert check_disk(_TwoDisks(state), settings, tmp_path / "ckpt").ok


# --- reboot-pending (contract 8.3) ------------------------------------------------------------


def test_a_pending_restart_is_a_warning_that_never_refuses_the_start(tmp_path: Path) -> None:
    marker = tmp_path / "reboot-required"
    marker.write_text("*** System restart required ***\n")
    checks, warnings = run_preflight(
        kind="train",
        hw=FakeHardware(),
        settings=DEFAULTS,
        checkpoint_dir=tmp_path / "checkpoints",
        state_dir=tmp_path / ".aide" / "training",
        our_pids=set(),
        gate_errors=[],
        reboot_pending=lambda: platform.reboot_pending(markers=[marker], windows=False),
    )
    pending = by_name(checks)["reboot-pending"]
    assert pending.ok and f"a restart is pending: {marker} exists" in pending.message
    assert [c.name for c in checks][-1] == "reboot-pending" and all(c.ok for c in checks)
    assert len(warnings) == 1 and f"the machine waits for a restart ({marker} exists)" in warnings[0]


def test_no_pending_restart_and_an_unreadable_one_pass_without_a_warning(tmp_path: Path) -> None:
    def unreadable() -> str | None:
        raise PermissionError(13, "Permission denied")

    for reader, said in (
        (lambda: None, "no restart pending"),
        (unreadable, "not known: [Errno 13] Permission denied"),
    ):
        checks, warnings = run_preflight(
            kind="train",
            hw=FakeHardware(),
            settings=DEFAULTS,
            checkpoint_dir=tmp_path / "checkpoints",
            state_dir=tmp_path / ".aide" / "training",
            our_pids=set(),
            gate_errors=[],
            reboot_pending=reader,
        )
        assert by_name(checks)["reboot-pending"] == Check("reboot-pending", True, said)
        assert warnings == []


def test_a_task_job_gets_no_reboot_check(tmp_path: Path) -> None:
    checks, _ = run_preflight(
        kind="task",
        hw=FakeHardware(),
        settings=DEFAULTS,
        checkpoint_dir=tmp_path,
        state_dir=tmp_path / ".aide" / "training",
        our_pids=set(),
        gate_errors=None,
        reboot_pending=lambda: "pending",
    )
    assert "reboot-pending" not in {c.name for c in checks}
