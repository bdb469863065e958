"""The Windows branches of ``arena_ls.platform``, with Win32 replaced by a recording fake.

Nothing here runs Windows: each test checks which Win32 calls are made, in
which order, with which flags and structures, and what a failing call
does, against the documented behaviour (see docs/windows.md).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from arena_ls import platform
from arena_ls.platform import (
    CREATE_BREAKAWAY_FROM_JOB,
    CREATE_NEW_PROCESS_GROUP,
    CREATE_NO_WINDOW,
    CREATE_SUSPENDED,
    DETACHED_PROCESS,
    FILE_RENAME_INFO_EX_CLASS,
    FILE_SHARE_ALL,
    JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    FileRenameInfo,
    IoCounters,
    JobBasicLimits,
    JobExtendedLimits,
    Win32,
)

X64 = ctypes.sizeof(ctypes.c_void_p) == 8
JOB, PROCESS, FILE = 0x1A0, 0x2B0, 0x3C0


class Library:
    """A recording fake of a ctypes library: every call is logged in ``log``; results by name."""

    def __init__(self, log: list[tuple[str, tuple[Any, ...]]], results: dict[str, Any]) -> None:
        self._log, self._results = log, results

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            self._log.append((name, args))
            result = self._results.get(name, 1)
            return result(*args) if callable(result) else result

        return call


class Fake:
    """A ``Win32`` over recording kernel32 and ntdll, sharing one call log with a fake Popen."""

    def __init__(self, last_error: int = 0, **results: Any) -> None:
        self.log: list[tuple[str, tuple[Any, ...]]] = []
        defaults: dict[str, Any] = {
            "CreateJobObjectW": JOB,
            "GetCurrentProcess": -1,
            "CreateFileW": FILE,
            "NtResumeProcess": 0,
        }
        defaults.update(results)
        library = Library(self.log, defaults)
        self.api = Win32(library, library, lambda: last_error, self._open_osfhandle)
        self.popen_calls: list[dict[str, Any]] = []
        self.popen_errors: list[OSError] = []
        self.killed = False
        self.fd_for_handle: dict[int, int] = {}

    def _open_osfhandle(self, handle: int, flags: int) -> int:
        self.log.append(("open_osfhandle", (handle, flags)))
        return self.fd_for_handle[handle]

    def popen(self, argv: list[str], **kwargs: Any) -> Any:
        self.log.append(("CreateProcess", (kwargs.get("creationflags", 0),)))
        self.popen_calls.append({"argv": argv, **kwargs})
        if self.popen_errors:
            raise self.popen_errors.pop(0)
        fake = self

        class Process:
            pid = 4242
            _handle = PROCESS

            def kill(self) -> None:
                fake.killed = True

        return Process()

    def names(self) -> list[str]:
        return [name for name, _ in self.log]


def sharing(code: int) -> OSError:
    return platform.win_error(code, "CreateProcess")


# ---------------------------------------------------------------- structures


@pytest.mark.skipif(not X64, reason="the sizes asserted are those of x64 Windows")
def test_job_structures_have_their_x64_sizes() -> None:
    assert ctypes.sizeof(JobBasicLimits) == 64
    assert ctypes.sizeof(IoCounters) == 48
    assert ctypes.sizeof(JobExtendedLimits) == 144


@pytest.mark.skipif(not X64, reason="the layout asserted is that of x64 Windows")
def test_the_rename_buffer_has_the_file_rename_info_layout() -> None:
    assert FileRenameInfo.FileName.offset == 20 and ctypes.sizeof(FileRenameInfo) == 24
    target = r"C:\runs\r1\state.json"
    buffer = platform.rename_info_buffer(target)
    raw = bytes(buffer)
    assert int.from_bytes(raw[0:4], "little") == 0x1 | 0x2  # REPLACE_IF_EXISTS | POSIX_SEMANTICS
    assert int.from_bytes(raw[8:16], "little") == 0  # no root directory: a full path
    name = target.encode("utf-16-le")
    assert int.from_bytes(raw[16:20], "little") == len(name)
    assert raw[20 : 20 + len(name)] == name and raw[20 + len(name) : 22 + len(name)] == b"\0\0"


# ---------------------------------------------------------------- job objects


def test_a_kill_on_close_job_is_created_and_configured() -> None:
    fake = Fake()
    assert fake.api.create_kill_on_close_job() == JOB
    assert fake.names() == ["CreateJobObjectW", "SetInformationJobObject"]
    job, info_class, limits, size = fake.log[1][1]
    assert job == JOB and info_class == JOB_OBJECT_EXTENDED_LIMIT_INFORMATION_CLASS
    assert size == ctypes.sizeof(JobExtendedLimits)
    assert limits._obj.BasicLimitInformation.LimitFlags == JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE


def test_every_failing_win32_call_raises_with_its_error_code() -> None:
    fake = Fake(last_error=87, SetInformationJobObject=0)
    with pytest.raises(OSError) as caught:
        fake.api.create_kill_on_close_job()
    assert caught.value.winerror == 87 and "SetInformationJobObject" in str(caught.value)  # type: ignore[attr-defined,unused-ignore]
    assert fake.log[-1] == ("CloseHandle", (JOB,)), "the half-made job is closed"
    for call, name in [
        (lambda api: api.assign(JOB, PROCESS), "AssignProcessToJobObject"),
        (lambda api: api.terminate_job(JOB), "TerminateJobObject"),
        (lambda api: api.give_handle(JOB, PROCESS), "DuplicateHandle"),
        (lambda api: api.close(JOB), "CloseHandle"),
    ]:
        failing = Fake(last_error=5, **{name: 0})
        with pytest.raises(PermissionError):
            call(failing.api)
    with pytest.raises(OSError, match="NtResumeProcess"):
        Fake(NtResumeProcess=0xC0000008 - (1 << 32)).api.resume(PROCESS)


def test_the_agent_is_created_suspended_in_its_job_then_resumed(tmp_path: Path) -> None:
    fake = Fake()
    pid = platform.start_agent_in_job(
        fake.api, ["python", "-m", "arena_ls.lifecycle.launch", "RUN"], cwd=str(tmp_path),
        log_file=str(tmp_path / "agent.log"), popen=fake.popen,
    )  # fmt: skip
    assert pid == 4242
    assert fake.names() == [
        "CreateJobObjectW",
        "SetInformationJobObject",
        "CreateProcess",
        "AssignProcessToJobObject",
        "GetCurrentProcess",
        "DuplicateHandle",
        "NtResumeProcess",
        "CloseHandle",
    ]
    flags = fake.popen_calls[0]["creationflags"]
    assert flags == CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW | CREATE_BREAKAWAY_FROM_JOB
    assert not flags & DETACHED_PROCESS, "a detached venv launcher would open a console window"
    assert fake.log[3][1] == (JOB, PROCESS)
    duplicate = fake.log[5][1]
    assert duplicate[1] == JOB and duplicate[2] == PROCESS, "the agent holds its own job"
    assert fake.log[6][1] == (PROCESS,) and fake.log[7][1] == (JOB,)


def test_refused_breakaway_falls_back_to_staying_in_the_job(tmp_path: Path) -> None:
    fake = Fake()
    fake.popen_errors.append(sharing(platform.ERROR_ACCESS_DENIED))
    platform.start_agent_in_job(
        fake.api, ["python", "-m", "x"], cwd=str(tmp_path), log_file=str(tmp_path / "a.log"), popen=fake.popen
    )
    first, second = (call["creationflags"] for call in fake.popen_calls)
    assert first & CREATE_BREAKAWAY_FROM_JOB and not second & CREATE_BREAKAWAY_FROM_JOB
    assert second & CREATE_SUSPENDED
    other = Fake()
    other.popen_errors.append(platform.win_error(2, "CreateProcess"))
    with pytest.raises(FileNotFoundError):
        platform.start_agent_in_job(
            other.api, ["python"], cwd=str(tmp_path), log_file=str(tmp_path / "a.log"), popen=other.popen
        )
    assert other.log[-1] == ("CloseHandle", (JOB,)), "the job is closed when no agent starts"


def test_an_agent_that_cannot_be_resumed_is_killed_and_its_job_closed(tmp_path: Path) -> None:
    fake = Fake(NtResumeProcess=-1073741823)
    with pytest.raises(OSError, match="NtResumeProcess"):
        platform.start_agent_in_job(
            fake.api, ["python"], cwd=str(tmp_path), log_file=str(tmp_path / "a.log"), popen=fake.popen
        )
    assert fake.killed and fake.log[-1] == ("CloseHandle", (JOB,))


def test_each_trainer_gets_a_job_that_kill_tree_and_the_attempts_end_terminate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = Fake()
    monkeypatch.setattr(platform.trainers, "_attempt_jobs", {})
    kwargs = {
        "cwd": ".",
        "env": {"A": "1", "__PYVENV_LAUNCHER__": "C:\\agent-venv\\Scripts\\python.exe"},
        "stdin": subprocess.DEVNULL,
        "stdout": 1,
        "stderr": 2,
    }
    process = platform.spawn_trainer_in_job(fake.api, ["trainer.exe", "--x"], kwargs, popen=fake.popen)
    assert process.pid == 4242
    assert fake.names() == [
        "CreateProcess",
        "CreateJobObjectW",
        "SetInformationJobObject",
        "AssignProcessToJobObject",
        "NtResumeProcess",
    ]
    assert (
        fake.popen_calls[0]["creationflags"] == CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
    )
    assert platform.trainers._attempt_jobs == {4242: JOB}, "the attempt's job handle is kept"
    assert fake.popen_calls[0]["env"] == {"A": "1"}, "the agent's own launcher variable is not inherited"
    assert platform.terminate_attempt_job(fake.api, 4242)  # kill_tree: the job's processes die
    assert fake.log[-1] == ("TerminateJobObject", (JOB, platform.KILLED_BY_JOB_EXIT_CODE))
    assert platform.end_attempt_job(fake.api, 4242)  # after the attempt: terminated and closed
    assert fake.names()[-2:] == ["TerminateJobObject", "CloseHandle"]
    assert platform.trainers._attempt_jobs == {} and not platform.end_attempt_job(fake.api, 4242)


def test_a_trainer_whose_job_fails_still_runs_in_the_agents_job(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake(last_error=5, AssignProcessToJobObject=0)
    monkeypatch.setattr(platform.trainers, "_attempt_jobs", {})
    kwargs = {"cwd": ".", "env": {}, "stdout": 1, "stderr": 2}
    platform.spawn_trainer_in_job(fake.api, ["trainer.exe"], kwargs, popen=fake.popen)
    assert fake.names()[-2:] == ["CloseHandle", "NtResumeProcess"]
    assert platform.trainers._attempt_jobs == {}


# ---------------------------------------------------------------- files


def test_the_posix_rename_opens_for_delete_and_sets_rename_info_ex() -> None:
    fake = Fake()
    assert fake.api.rename_posix(r"C:\r\.state.json.tmp", r"C:\r\state.json")
    assert fake.names() == ["CreateFileW", "SetFileInformationByHandle", "CloseHandle"]
    path, access, share, _, disposition, _, _ = fake.log[0][1]
    assert path == r"C:\r\.state.json.tmp" and access == platform.DELETE | platform.SYNCHRONIZE
    assert share == FILE_SHARE_ALL and disposition == platform.OPEN_EXISTING
    handle, info_class, buffer, size = fake.log[1][1]
    assert handle == FILE and info_class == FILE_RENAME_INFO_EX_CLASS and size == ctypes.sizeof(buffer)


def test_a_file_system_without_posix_rename_falls_back_and_a_held_file_is_a_sharing_violation() -> None:
    unsupported = Fake(last_error=platform.ERROR_INVALID_PARAMETER, SetFileInformationByHandle=0)
    assert unsupported.api.rename_posix("a", "b") is False
    assert unsupported.log[-1] == ("CloseHandle", (FILE,))
    held = Fake(last_error=platform.ERROR_SHARING_VIOLATION, SetFileInformationByHandle=0)
    with pytest.raises(PermissionError) as caught:
        held.api.rename_posix("a", "b")
    assert platform.is_sharing_violation(caught.value)


def test_readers_open_with_delete_sharing(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b'{"ok": true}')
    fake = Fake()
    fake.fd_for_handle[FILE] = os.open(target, os.O_RDONLY)
    assert platform.files._windows_read(fake.api, target) == b'{"ok": true}'
    _, access, share, _, _, _, _ = fake.log[0][1]
    assert access == platform.GENERIC_READ and share == FILE_SHARE_ALL
    missing = Fake(last_error=platform.ERROR_FILE_NOT_FOUND, CreateFileW=platform.INVALID_HANDLE_VALUE)
    with pytest.raises(FileNotFoundError):
        platform.files._windows_read(missing.api, target)


# ---------------------------------------------------------------- processes and signals


def windows_sys(monkeypatch: pytest.MonkeyPatch, executable: str = "python.exe") -> None:
    """``arena_ls.platform`` sees Windows (only its modules' own ``sys`` is replaced)."""
    windows = types.SimpleNamespace(platform="win32", executable=executable)
    for module in (platform.processes, platform.launching, platform.trainers):
        monkeypatch.setattr(module, "sys", windows)


def test_no_console_event_is_sent_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    monkeypatch.setattr(platform.winapi, "_win32", fake.api)
    windows_sys(monkeypatch)
    assert platform.cooperative_signal_name() is None
    assert platform.send_cooperative_signal(os.getpid()) is False
    assert fake.log == [], "no GenerateConsoleCtrlEvent, no AttachConsole: nothing reaches the group"


def test_the_server_starts_the_agent_through_an_intermediate(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    started: list[tuple[list[str], dict[str, Any]]] = []
    windows_sys(monkeypatch, executable=str(tmp_path / "python.exe"))
    monkeypatch.setattr(subprocess, "Popen", lambda argv, **kw: started.append((argv, kw)) or "intermediate")
    result = platform.spawn_detached(["py", "-m", "launch", "RUN"], cwd=tmp_path, log_file=tmp_path / "a.log")
    assert result == "intermediate"
    argv, kwargs = started[0]
    assert argv[1:4] == ["-m", "arena_ls.platform", "detach"]
    assert json.loads(argv[4]) == {
        "argv": ["py", "-m", "launch", "RUN"],
        "cwd": str(tmp_path),
        "log": str(tmp_path / "a.log"),
    }
    assert kwargs["creationflags"] == CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW
    assert "start_new_session" not in kwargs


def test_the_intermediate_starts_the_agent_and_exits(monkeypatch: pytest.MonkeyPatch) -> None:
    requests: list[tuple[list[str], str, str]] = []
    monkeypatch.setattr(platform.launching, "win32", lambda: "api")
    monkeypatch.setattr(
        platform.launching,
        "start_agent_in_job",
        lambda api, argv, cwd, log_file: requests.append((argv, cwd, log_file)) or 99,
    )
    request = json.dumps({"argv": ["py", "-m", "x"], "cwd": "C:\\ws", "log": "C:\\ws\\agent.log"})
    assert platform.detach_main(["detach", request]) == 0
    assert requests == [(["py", "-m", "x"], "C:\\ws", "C:\\ws\\agent.log")]
    assert platform.detach_main(["detach", "not json"]) == 1
    assert platform.detach_main([]) == 2


def test_a_venv_launcher_is_replaced_by_its_base_interpreter(tmp_path: Path) -> None:
    home = tmp_path / "Python311"
    home.mkdir()
    (home / "python.exe").write_bytes(b"")
    venv = tmp_path / "proj" / ".venv"
    (venv / "Scripts").mkdir(parents=True)
    launcher = venv / "Scripts" / "python.exe"
    launcher.write_bytes(b"")
    (venv / "pyvenv.cfg").write_text(f"home = {home}\ninclude-system-site-packages = false\n")
    assert platform.venv_base_interpreter(launcher) == (
        str(home / "python.exe"),
        {"__PYVENV_LAUNCHER__": str(launcher)},
    )
    plain = home / "python.exe"
    assert platform.venv_base_interpreter(plain) == (str(plain), {})
    (venv / "pyvenv.cfg").write_text("home = C:\\nowhere\n")
    assert platform.venv_base_interpreter(launcher) == (str(launcher), {})


def test_the_trainer_pipes_are_created_large(monkeypatch: pytest.MonkeyPatch) -> None:
    read_fd, write_fd = os.pipe()
    created: list[tuple[Any, int]] = []
    fds = {0x10: read_fd, 0x11: write_fd}
    fake_winapi = types.SimpleNamespace(
        CreatePipe=lambda attrs, size: created.append((attrs, size)) or (0x10, 0x11)
    )
    fake_msvcrt = types.SimpleNamespace(open_osfhandle=lambda handle, flags: fds[handle])
    monkeypatch.setitem(sys.modules, "_winapi", fake_winapi)
    monkeypatch.setitem(sys.modules, "msvcrt", fake_msvcrt)
    windows_sys(monkeypatch)
    kwargs: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.DEVNULL}
    pipes = platform.trainers._large_pipes(Fake().api, kwargs)
    assert created == [(None, platform.TRAINER_PIPE_BYTES)], "only stdout asked for a pipe"
    assert kwargs["stdout"] == write_fd and kwargs["stderr"] == subprocess.DEVNULL
    assert pipes.child_ends == [write_fd]
    process = types.SimpleNamespace(stdout=None)
    pipes.attach(process)
    os.write(write_fd, b"through the large pipe\n")
    os.close(write_fd)
    assert process.stdout is not None and process.stdout.read() == b"through the large pipe\n"
    process.stdout.close()
