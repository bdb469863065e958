"""Desktop notifications on Windows and macOS, their programs faked (contract 8.3).

Windows: the toast is Windows PowerShell 5.1 running a fixed script
(``-EncodedCommand``) that reads the title and body from its environment, so a
job name or a trainer's words can never become code: the argument list is the
same whatever they hold. macOS: ``osascript`` with a fixed ``on run argv``
script and the text as its arguments. A program that fails, hangs or is
missing is a ``NotifyUnavailable`` with the reason, never an exception of
another kind.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Mapping, Sequence

import pytest

from arena_ls import platform_notify
from arena_ls.platform_notify import (
    TOAST_BODY_ENV,
    TOAST_SCRIPT,
    TOAST_TITLE_ENV,
    NotifyUnavailable,
    osascript_notification,
    toast,
)

HOSTILE = 'Tiny LM\'; Remove-Item -Recurse C:\\ ; $(calc) `"<toast>&amp;</toast>\n"@ end'


class Runner:
    """Records the argument list and environment; answers with ``code`` and ``stderr``."""

    def __init__(self, code: int = 0, stderr: bytes = b"", error: Exception | None = None) -> None:
        self.code, self.stderr, self.error = code, stderr, error
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(self, argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[bytes]:
        self.calls.append((list(argv), dict(env)))
        if self.error is not None:
            raise self.error
        return subprocess.CompletedProcess(list(argv), self.code, b"", self.stderr)


def test_the_toast_carries_its_text_in_the_environment_only() -> None:
    runner = Runner()
    assert toast(HOSTILE, "step 45, loss 1.5\n" + HOSTILE, run=runner) == "a Windows toast"
    [(argv, env)] = runner.calls
    assert argv[0].endswith("\\System32\\WindowsPowerShell\\v1.0\\powershell.exe") or argv[0].endswith(
        "System32/WindowsPowerShell/v1.0/powershell.exe"
    ), "Windows PowerShell 5.1: PowerShell 7 cannot load the toast's WinRT types"
    assert argv[1:6] == ["-NoProfile", "-NonInteractive", "-ExecutionPolicy", "Bypass", "-EncodedCommand"]
    assert base64.b64decode(argv[6]).decode("utf-16-le") == TOAST_SCRIPT
    assert argv == toast_argv_for("anything else"), "the argument list never depends on the text"
    assert env[TOAST_TITLE_ENV] == " ".join(HOSTILE.split()), "one line"
    assert env[TOAST_BODY_ENV] == "step 45, loss 1.5\n" + HOSTILE
    assert "$env:ARENA_TOAST_TITLE" in TOAST_SCRIPT and "CreateTextNode" in TOAST_SCRIPT


def toast_argv_for(title: str) -> list[str]:
    runner = Runner()
    toast(title, title, run=runner)
    return runner.calls[0][0]


def test_a_nul_in_the_text_cannot_break_the_environment() -> None:
    runner = Runner()
    toast("a\0b", "c\0d", run=runner)
    env = runner.calls[0][1]
    assert (env[TOAST_TITLE_ENV], env[TOAST_BODY_ENV]) == ("ab", "cd")


def test_a_failing_toast_says_why() -> None:
    with pytest.raises(NotifyUnavailable, match=r"exit status 1\): Unable to find type"):
        toast("t", "b", run=Runner(1, b"some line\nUnable to find type [Windows.UI.Notifications]\n"))


def test_a_hanging_or_missing_program_is_unavailable_not_an_error() -> None:
    with pytest.raises(NotifyUnavailable, match="did not finish"):
        toast("t", "b", run=Runner(error=subprocess.TimeoutExpired(["powershell.exe"], 10)))
    with pytest.raises(NotifyUnavailable, match="cannot run"):
        osascript_notification("t", "b", run=Runner(error=FileNotFoundError(2, "No such file")))


def test_macos_passes_the_text_as_arguments_to_a_fixed_script() -> None:
    runner = Runner()
    assert osascript_notification(HOSTILE, "body " + HOSTILE, run=runner) == "osascript"
    [(argv, _)] = runner.calls
    assert argv[:7] == [
        "/usr/bin/osascript",
        "-e", "on run argv",
        "-e", "display notification (item 2 of argv) with title (item 1 of argv)",
        "-e", "end run",
    ]  # fmt: skip
    assert argv[7:] == [" ".join(HOSTILE.split()), "body " + HOSTILE]


@pytest.mark.parametrize(
    ("system", "chosen"), [("win32", "toast"), ("darwin", "osascript_notification")]
)  # fmt: skip
def test_each_platform_has_its_way(monkeypatch: pytest.MonkeyPatch, system: str, chosen: str) -> None:
    called: list[tuple[str, str]] = []
    monkeypatch.setattr(sys, "platform", system)
    monkeypatch.setattr(platform_notify, chosen, lambda title, body: called.append((title, body)) or chosen)
    assert platform_notify.notify_desktop("t", "b") == chosen
    assert called == [("t", "b")]


def test_an_unknown_platform_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "plan9")
    with pytest.raises(NotifyUnavailable, match="not supported on plan9"):
        platform_notify.notify_desktop("t", "b")
