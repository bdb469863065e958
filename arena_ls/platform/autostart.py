"""A start at logon (``arena autostart``): Windows' Task Scheduler, a systemd user unit, an XDG
autostart entry (issue 37). The command is run by the argument list ``run`` (the tests fake it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

TimeoutExpired = subprocess.TimeoutExpired
Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]
AUTOSTART_TIMEOUT = 30.0
"""Seconds ``schtasks`` or ``systemctl --user`` may take before the command is given up."""


def run_quietly(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a system tool by its argument list (never a shell), its output captured."""
    return subprocess.run(
        argv, capture_output=True, text=True, errors="replace", timeout=AUTOSTART_TIMEOUT, check=False
    )


def autostart_kind(*, windows: bool | None = None, systemd_user: bool | None = None) -> str:
    """Where a start at logon is registered here: ``task-scheduler``, ``systemd`` or ``xdg``."""
    if windows is None:
        windows = sys.platform == "win32"
    if windows:
        return "task-scheduler"
    if systemd_user is None:
        systemd_user = _systemd_user_running()
    return "systemd" if systemd_user else "xdg"


def _systemd_user_running() -> bool:
    """A systemd user manager serves this user (its runtime folder has ``systemd/private``)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime or shutil_which("systemctl") is None:
        return False
    return (Path(runtime) / "systemd" / "private").exists()


def shutil_which(name: str) -> str | None:
    import shutil  # rarely needed: not at the agent's start

    return shutil.which(name)


def config_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME``, else ``~/.config`` (POSIX)."""
    environ = os.environ if environ is None else environ
    configured = environ.get("XDG_CONFIG_HOME")
    if configured and os.path.isabs(configured):
        return Path(configured)
    return Path.home() / ".config"


def systemd_quote(argv: Sequence[str]) -> str:
    """An ``ExecStart=`` line's words (systemd.service(5) "Command lines"): each word in double
    quotes, with ``\\`` and ``"`` escaped, ``%`` doubled (a specifier) and ``$`` doubled (a
    variable)."""
    words = []
    for word in argv:
        escaped = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
        words.append(f'"{escaped}"')
    return " ".join(words)


def desktop_exec_quote(argv: Sequence[str]) -> str:
    """An XDG ``Exec=`` value (Desktop Entry Specification, "The Exec key"): each word quoted,
    with ``"``, `` ` ``, ``$`` and ``\\`` escaped by a backslash, ``%`` doubled, then the string
    escapes of a value (a backslash doubled again)."""
    words = []
    for word in argv:
        quoted = "".join("\\" + char if char in '"`$\\' else char for char in word).replace("%", "%%")
        words.append(f'"{quoted}"')
    return " ".join(words).replace("\\", "\\\\")


def systemd_unit(description: str, argv: Sequence[str], cwd: Path) -> str:
    """A user unit that runs ``argv`` once at logon. ``KillMode=process``: the run it resumes is
    owned by a detached job agent, which must outlive this one-shot command."""
    return (
        "[Unit]\n"
        f"Description={description}\n"
        "After=default.target\n\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"WorkingDirectory={_systemd_path(cwd)}\n"
        f"ExecStart={systemd_quote(argv)}\n"
        "KillMode=process\n\n"
        "[Install]\n"
        "WantedBy=default.target\n"
    )


def _systemd_path(path: Path) -> str:
    """A path setting's value: taken as written (no quotes), ``%`` doubled (a specifier)."""
    return str(path).replace("%", "%%")


def desktop_entry(description: str, argv: Sequence[str], cwd: Path) -> str:
    """An XDG autostart entry that runs ``argv`` at logon (no window, no menu entry)."""
    return (
        "[Desktop Entry]\n"
        "Type=Application\n"
        f"Name={_desktop_text(description)}\n"
        f"Exec={desktop_exec_quote(argv)}\n"
        f"Path={_desktop_text(str(cwd))}\n"
        "Terminal=false\n"
        "NoDisplay=true\n"
        "X-GNOME-Autostart-enabled=true\n"
    )


def _desktop_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def task_scheduler_xml(description: str, argv: Sequence[str], cwd: Path, user: str) -> str:
    """A Task Scheduler task that runs ``argv`` when ``user`` logs on, as that user, without
    elevation, on battery too, with no time limit (``schtasks /Create /XML``). A non-administrator
    may register a logon trigger only for themselves (MS-TSCH 3.2.5.4.2): hence the explicit user."""
    from xml.sax.saxutils import escape  # rarely needed: not at the agent's start

    command, *arguments = argv
    return (
        '<?xml version="1.0" encoding="UTF-16"?>\n'
        '<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">\n'
        f"  <RegistrationInfo><Description>{escape(description)}</Description></RegistrationInfo>\n"
        "  <Triggers><LogonTrigger><Enabled>true</Enabled>"
        f"<UserId>{escape(user)}</UserId></LogonTrigger></Triggers>\n"
        f'  <Principals><Principal id="Author"><UserId>{escape(user)}</UserId>'
        "<LogonType>InteractiveToken</LogonType><RunLevel>LeastPrivilege</RunLevel></Principal></Principals>\n"
        "  <Settings><MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>"
        "<DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>"
        "<StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>"
        "<ExecutionTimeLimit>PT0S</ExecutionTimeLimit><Enabled>true</Enabled></Settings>\n"
        '  <Actions Context="Author"><Exec>'
        f"<Command>{escape(command)}</Command>"
        f"<Arguments>{escape(subprocess.list2cmdline(arguments))}</Arguments>"
        f"<WorkingDirectory>{escape(str(cwd))}</WorkingDirectory>"
        "</Exec></Actions>\n"
        "</Task>\n"
    )


def windows_user(environ: Mapping[str, str] | None = None) -> str:
    """``DOMAIN\\user`` of the person running this (Windows' environment)."""
    environ = os.environ if environ is None else environ
    user = environ.get("USERNAME") or os.getlogin()
    domain = environ.get("USERDOMAIN")
    return f"{domain}\\{user}" if domain else user


def schtasks_create(task: str, xml_file: Path) -> list[str]:
    return ["schtasks", "/Create", "/TN", task, "/XML", str(xml_file), "/F"]


def schtasks_delete(task: str) -> list[str]:
    return ["schtasks", "/Delete", "/TN", task, "/F"]


def schtasks_query(task: str) -> list[str]:
    return ["schtasks", "/Query", "/TN", task]
