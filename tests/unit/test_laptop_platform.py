"""The laptop's platform pieces (contract 8.3): the boot, a pending restart (Windows faked), the
logon entry of ``arena autostart`` (Windows' scheduler faked, a real systemd unit and XDG entry
written and parsed back), and the restart policy of ``lifecycle/reboot.py``."""

from __future__ import annotations

import configparser
import subprocess
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.client.autostart import Autostart, entry_name, resume_command
from arena_ls.client.errors import CliError
from arena_ls.health.model import BootIdentity
from arena_ls.lifecycle.reboot import BOOT_TOLERANCE, AfterReboot, restart_evidence
from arena_ls.lifecycle.rundir import BootRecord, RunSpec

# -- the boot ------------------------------------------------------------------------------


def test_the_boot_id_is_read_from_its_file_and_none_when_absent(tmp_path: Path) -> None:
    boot_file = tmp_path / "boot_id"
    boot_file.write_text("5f3c2a9e-0d1b-4c55-9c1e-2b7f00a1b2c3\n")
    assert platform.boot_id(boot_file) == "5f3c2a9e-0d1b-4c55-9c1e-2b7f00a1b2c3"
    assert platform.boot_id(tmp_path / "missing") is None


def test_this_machine_has_a_boot_time_in_the_past() -> None:
    booted = platform.boot_time()
    assert booted is not None and booted > 0


def spec(boot: BootRecord | None, created_at: float = 1000.0) -> RunSpec:
    return RunSpec(
        run_id="r", job_id="j", job_name="j", kind="train", argv=[], cwd=".", created_at=created_at, boot=boot
    )


def test_a_new_boot_id_is_a_restart_and_the_same_one_never_is() -> None:
    launched = spec(BootRecord("one", 900.0))
    assert restart_evidence(launched, BootIdentity("two", 900.0)) is not None
    # The same boot whatever the clock did (a big step moves the computed boot time).
    assert restart_evidence(launched, BootIdentity("one", 900.0 + 7200)) is None


def test_without_boot_ids_the_boot_time_decides_with_a_tolerance() -> None:
    launched = spec(BootRecord(None, 900.0), created_at=1000.0)
    assert restart_evidence(launched, BootIdentity(None, 900.0 + BOOT_TOLERANCE / 2)) is None  # NTP
    assert restart_evidence(launched, BootIdentity(None, 5000.0)) is not None
    # A boot time past the recorded one yet not after the run's start is no restart under it.
    assert restart_evidence(launched, BootIdentity(None, 999.0)) is None
    assert restart_evidence(launched, BootIdentity(None, None)) is None


def test_a_run_recorded_before_boots_were_is_never_called_restarted() -> None:
    assert restart_evidence(spec(None), BootIdentity("two", 5000.0)) is None


def test_the_offer_goes_once_resumed_superseded_or_never_wanted() -> None:
    assert AfterReboot("ask", 40, None).offer == "Resume from step 40"
    assert AfterReboot("resume", 40, None).offer == "Resume from step 40"
    assert AfterReboot("ask", 40, "run-2").offer is None
    assert AfterReboot("ask", 40, None, newer_run="run-3").offer is None
    assert AfterReboot("never", 40, None).offer is None
    assert AfterReboot("ask", None, None).offer is None  # no checkpoint: nothing to resume
    wire = AfterReboot("ask", 40, None, problem="pre-flight failed").to_wire()
    assert wire == {
        "policy": "ask", "step": 40, "offer": "Resume from step 40", "resumedBy": None,
        "newerRun": None, "problem": "pre-flight failed", "path": None,
    }  # fmt: skip
    assert AfterReboot("ask", 40, None, path="out/checkpoint-40").to_wire()["path"] == "out/checkpoint-40"


# -- a pending restart -----------------------------------------------------------------------


class FakeRegistry:
    """``winreg`` as ``reboot_pending`` uses it: HKLM keys and values, from a dict."""

    HKEY_LOCAL_MACHINE = 0x80000002
    KEY_READ = 0x20019
    KEY_WOW64_64KEY = 0x0100

    def __init__(self, keys: dict[str, dict[str, Any]]) -> None:
        self.keys = keys
        self.opened: list[tuple[int, str, int]] = []
        self.closed = 0

    def OpenKey(self, hive: int, key: str, reserved: int, access: int) -> str:
        self.opened.append((hive, key, access))
        if key not in self.keys:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return key

    def QueryValueEx(self, handle: str, name: str) -> tuple[Any, int]:
        values = self.keys[handle]
        if name not in values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return values[name], 7

    def CloseKey(self, handle: str) -> None:
        self.closed += 1


SESSION = platform.SESSION_MANAGER_KEY


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({}, None),
        ({SESSION: {}}, None),
        ({SESSION: {"PendingFileRenameOperations": []}}, None),
        ({platform.WINDOWS_REBOOT_KEYS[0]: {}}, "Component Based Servicing"),
        ({platform.WINDOWS_REBOOT_KEYS[1]: {}}, "RebootRequired"),
        ({SESSION: {"PendingFileRenameOperations": ["\\??\\C:\\x.dll", ""]}}, "PendingFileRenameOperations"),
    ],
)
def test_windows_pending_restart_is_read_from_the_three_places(
    keys: dict[str, Any], expected: str | None
) -> None:
    registry = FakeRegistry(keys)
    found = platform.reboot_pending(registry=registry, windows=True)
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected in found
    assert all(hive == registry.HKEY_LOCAL_MACHINE for hive, _, _ in registry.opened)
    assert all(access & registry.KEY_WOW64_64KEY for _, _, access in registry.opened)  # the 64-bit view
    assert registry.closed == sum(1 for _, key, _ in registry.opened if key in keys)  # every handle closed


def test_linux_pending_restart_is_its_marker_file_with_the_packages(tmp_path: Path) -> None:
    marker = tmp_path / "reboot-required"
    assert platform.reboot_pending(markers=[marker], windows=False) is None
    marker.write_text("*** System restart required ***\n")
    assert platform.reboot_pending(markers=[marker], windows=False) == f"{marker} exists"
    (tmp_path / "reboot-required.pkgs").write_text("linux-image-6.1\nlibc6\nlinux-image-6.1\n")
    found = platform.reboot_pending(markers=[marker], windows=False)
    assert found == f"{marker} exists (asked by libc6, linux-image-6.1)"


# -- the logon entry ---------------------------------------------------------------------------


class Recorder:
    """The system tools' runner: records each argument list, answers as told."""

    def __init__(self, answers: dict[str, int] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.answers = answers or {}
        self.files: dict[str, str] = {}

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if "/XML" in argv:  # the scheduler reads the file before it is deleted
            self.files[argv[argv.index("/TN") + 1]] = Path(argv[argv.index("/XML") + 1]).read_text(
                encoding="utf-16"
            )
        code = self.answers.get(argv[1] if len(argv) > 1 else "", 0)
        return subprocess.CompletedProcess(
            argv, code, stdout="enabled\n", stderr="ERROR: Access is denied.\n"
        )


ODD_ROOT = Path('/home/seed/my runs/100% "E" $HOME')


def test_the_entry_runs_resume_interrupted_in_its_workspace_by_name() -> None:
    argv = resume_command(Path("/w"), "resume", python="/venv/bin/python")
    assert argv == [
        "/venv/bin/python", "-m", "arena_ls.client.entry", "resume-interrupted", "--root", "/w",
        "--after-reboot", "resume",
    ]  # fmt: skip
    assert entry_name(Path("/a/ws")) != entry_name(Path("/b/ws"))  # one per workspace
    assert entry_name(ODD_ROOT).startswith("arena-resume-100-E-HOME-")


def test_windows_registers_a_logon_task_for_this_user_with_schtasks(tmp_path: Path) -> None:
    runner = Recorder()
    entry = Autostart(
        ODD_ROOT, run=runner, kind="task-scheduler", environ={"USERNAME": "seed", "USERDOMAIN": "LAPTOP"}
    )
    argv = resume_command(ODD_ROOT, None, python="C:\\Python310\\python.exe")
    assert "Task Scheduler task \\arena-ls\\" in entry.install(argv)
    create = runner.calls[0]
    assert create[:4] == ["schtasks", "/Create", "/TN", entry.task] and create[-1] == "/F"
    assert not Path(create[create.index("/XML") + 1]).exists()  # the temporary XML is gone
    task = ElementTree.fromstring(runner.files[entry.task].encode("utf-16"))
    ns = {"t": "http://schemas.microsoft.com/windows/2004/02/mit/task"}
    assert task.findtext("t:Triggers/t:LogonTrigger/t:UserId", namespaces=ns) == "LAPTOP\\seed"
    assert task.findtext("t:Principals/t:Principal/t:RunLevel", namespaces=ns) == "LeastPrivilege"
    assert task.findtext("t:Settings/t:DisallowStartIfOnBatteries", namespaces=ns) == "false"
    assert task.findtext("t:Actions/t:Exec/t:Command", namespaces=ns) == "C:\\Python310\\python.exe"
    arguments = task.findtext("t:Actions/t:Exec/t:Arguments", namespaces=ns)
    assert arguments == subprocess.list2cmdline(argv[1:])
    assert task.findtext("t:Actions/t:Exec/t:WorkingDirectory", namespaces=ns) == str(ODD_ROOT)
    assert entry.status() == f"Task Scheduler task {entry.task}"
    assert runner.calls[-1] == ["schtasks", "/Query", "/TN", entry.task]
    assert entry.remove() == f"Task Scheduler task {entry.task}"
    assert runner.calls[-1] == ["schtasks", "/Delete", "/TN", entry.task, "/F"]


def test_windows_says_why_the_scheduler_refused_and_absent_is_not_installed() -> None:
    runner = Recorder({"/Create": 1, "/Query": 1})
    entry = Autostart(Path("C:/w"), run=runner, kind="task-scheduler", environ={"USERNAME": "seed"})
    with pytest.raises(CliError, match="Access is denied"):
        entry.install(["py", "-m", "arena_ls.client.entry"])
    assert entry.status() is None
    assert entry.remove() is None
    assert all(call[1] != "/Delete" for call in runner.calls)


def quoted_words(value: str) -> list[str]:
    """Words of a line of double-quoted words, a backslash escaping the next character (the
    quoting both systemd's ``ExecStart=`` and the Desktop Entry ``Exec=`` use)."""
    words: list[str] = []
    chars = iter(value)
    for char in chars:
        if char == " ":
            continue
        assert char == '"', value
        word = ""
        for inner in chars:
            if inner == "\\":
                word += next(chars)
            elif inner == '"':
                break
            else:
                word += inner
        words.append(word)
    return words


def unit_words(value: str) -> list[str]:
    """systemd's ``ExecStart=`` words: ``%%`` is a ``%``, ``$$`` a ``$``."""
    return [word.replace("%%", "%").replace("$$", "$") for word in quoted_words(value)]


def test_linux_writes_a_systemd_user_unit_that_parses_back_and_enables_it(tmp_path: Path) -> None:
    runner = Recorder()
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    entry = Autostart(ODD_ROOT, run=runner, kind="systemd", environ=environ)
    argv = resume_command(ODD_ROOT, "resume", python="/opt/py 3/bin/python")
    entry.install(argv)
    unit_file = tmp_path / "config" / "systemd" / "user" / f"{entry.name}.service"
    assert entry.unit_file == unit_file and unit_file.exists()
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(unit_file.read_text(encoding="utf-8"))
    assert unit["Service"]["Type"] == "oneshot"
    assert unit["Service"]["KillMode"] == "process"  # the resumed run's agent outlives the unit
    assert unit["Install"]["WantedBy"] == "default.target"
    assert unit["Service"]["WorkingDirectory"].replace("%%", "%") == str(ODD_ROOT)
    assert unit_words(unit["Service"]["ExecStart"]) == argv
    assert runner.calls == [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", f"{entry.name}.service"],
    ]
    assert entry.status() == f"systemd user unit {unit_file} (enabled)"
    assert entry.remove() == f"systemd user unit {unit_file}"
    assert not unit_file.exists()
    assert ["systemctl", "--user", "disable", f"{entry.name}.service"] in runner.calls
    assert entry.status() is None and entry.remove() is None


def desktop_words(value: str) -> list[str]:
    """The Desktop Entry ``Exec=`` words: the string escapes undone, then the quoting, ``%%`` a ``%``."""
    return [word.replace("%%", "%") for word in quoted_words(value.replace("\\\\", "\\"))]


def test_linux_without_systemd_writes_an_xdg_autostart_entry(tmp_path: Path) -> None:
    runner = Recorder()
    entry = Autostart(ODD_ROOT, run=runner, kind="xdg", environ={"XDG_CONFIG_HOME": str(tmp_path)})
    argv = resume_command(ODD_ROOT, None, python="/opt/py 3/bin/python")
    assert entry.install(argv) == f"XDG autostart entry {tmp_path / 'autostart' / (entry.name + '.desktop')}"
    desktop = configparser.ConfigParser(interpolation=None)
    desktop.optionxform = str  # type: ignore[assignment,method-assign]
    desktop.read_string(entry.desktop_file.read_text(encoding="utf-8"))
    section = desktop["Desktop Entry"]
    assert section["Type"] == "Application" and section["Terminal"] == "false"
    assert desktop_words(section["Exec"]) == argv
    assert section["Path"] == str(ODD_ROOT)
    assert runner.calls == []  # nothing to run: the session reads the folder at logon
    assert entry.status() is not None
    assert entry.remove() is not None and entry.status() is None


def test_the_platform_picks_the_scheduler_systemd_or_xdg() -> None:
    assert platform.autostart_kind(windows=True) == "task-scheduler"
    assert platform.autostart_kind(windows=False, systemd_user=True) == "systemd"
    assert platform.autostart_kind(windows=False, systemd_user=False) == "xdg"


def test_config_home_is_xdg_config_home_when_absolute() -> None:
    assert platform.config_home({"XDG_CONFIG_HOME": "/x/conf"}) == Path("/x/conf")
    assert platform.config_home({"XDG_CONFIG_HOME": "relative"}) == Path.home() / ".config"
    assert platform.config_home({}) == Path.home() / ".config"


def test_a_resume_under_way_is_not_taken_for_a_persons_newer_run(tmp_path: Path) -> None:
    from arena_ls.lifecycle.reboot import AFTER_REBOOT_CLAIM, after_reboot, record_resumed
    from arena_ls.lifecycle.rundir import RunDir

    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    assert after_reboot(run_dir, "resume", 40, "later").newer_run == "later"  # a person started it
    assert run_dir.claim_once(AFTER_REBOOT_CLAIM)
    assert not run_dir.claim_once(AFTER_REBOOT_CLAIM)  # once, whoever asks next
    under_way = after_reboot(run_dir, "resume", 40, "later")
    assert under_way.newer_run is None and under_way.offer == "Resume from step 40"
    record_resumed(run_dir, "later", step=40)
    done = after_reboot(run_dir, "resume", 55, "later")  # the resumed run has saved step 55 since
    assert done.resumed_by == "later" and done.offer is None
    assert done.step == 40  # where the resume started, not the job's last checkpoint now
    record_resumed(run_dir, None, "the resume after the restart was refused: pre-flight failed")
    refused = after_reboot(run_dir, "resume", 40, None)
    assert refused.problem is not None and refused.offer == "Resume from step 40"
