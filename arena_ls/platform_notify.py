"""A desktop notification, each platform's way (contract 8.3, ``notify.desktop``).

Part of ``arena_ls.platform`` (every platform difference lives there or in a
module it owns). The job agent calls ``notify_desktop`` on a thread of its
own; each way returns within ``DESKTOP_TIMEOUT`` or raises
``NotifyUnavailable`` with the reason, which the agent writes in the run's log.
Nothing a trainer, a job's name or a path holds is ever read as code: the
title and body travel as data (a D-Bus string, an environment variable, an
argument), never inside a script's text or a shell line.

- Linux: ``org.freedesktop.Notifications.Notify`` on the session bus
  (``DBUS_SESSION_BUS_ADDRESS``), through jeepney; the body's ``&<>`` are
  escaped where the server reads markup (``body-markup``).
- Windows: a toast through Windows PowerShell 5.1 (``powershell.exe``, whose
  WinRT projection PowerShell 7 lacks), a fixed script passed as
  ``-EncodedCommand`` that reads the title and body from its environment
  (``ARENA_TOAST_TITLE``, ``ARENA_TOAST_BODY``) into XML text nodes.
- macOS: ``osascript`` with a fixed ``on run argv`` script, the title and
  body its arguments.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

DESKTOP_TIMEOUT = 10.0
APP_NAME = "arena-ls"
NOTIFICATIONS_NAME = "org.freedesktop.Notifications"
NOTIFICATIONS_PATH = "/org/freedesktop/Notifications"
EXPIRE_DEFAULT = -1
"""The server's own timeout for the notification."""
URGENCY_NORMAL = 1

TOAST_TITLE_ENV = "ARENA_TOAST_TITLE"
TOAST_BODY_ENV = "ARENA_TOAST_BODY"
POWERSHELL_APP_ID = "{1AC14E77-02E7-4E5D-B744-2EB1AE5198B7}\\WindowsPowerShell\\v1.0\\powershell.exe"
"""The AppUserModelID toasts are shown under: Windows PowerShell's own (no registration needed)."""
TOAST_SCRIPT = f"""$ErrorActionPreference = 'Stop'
[void][Windows.UI.Notifications.ToastNotificationManager,Windows.UI.Notifications,ContentType=WindowsRuntime]
$kind = [Windows.UI.Notifications.ToastTemplateType]::ToastText02
$xml = [Windows.UI.Notifications.ToastNotificationManager]::GetTemplateContent($kind)
$texts = $xml.GetElementsByTagName('text')
$null = $texts.Item(0).AppendChild($xml.CreateTextNode($env:{TOAST_TITLE_ENV}))
$null = $texts.Item(1).AppendChild($xml.CreateTextNode($env:{TOAST_BODY_ENV}))
$toast = [Windows.UI.Notifications.ToastNotification]::new($xml)
[Windows.UI.Notifications.ToastNotificationManager]::CreateToastNotifier('{POWERSHELL_APP_ID}').Show($toast)
"""
"""Fixed: the title and body are read from the environment as text nodes, never parsed as XML or code."""

OSASCRIPT = "/usr/bin/osascript"
OSASCRIPT_LINES = (
    "on run argv",
    "display notification (item 2 of argv) with title (item 1 of argv)",
    "end run",
)

CREATE_NO_WINDOW = 0x08000000

Runner = Callable[[Sequence[str], Mapping[str, str]], "subprocess.CompletedProcess[bytes]"]
"""Runs an argument list with an environment, waits at most ``DESKTOP_TIMEOUT``; the tests fake it."""


class NotifyUnavailable(Exception):
    """No desktop notification could be shown; ``str()`` says why, for the run's log."""


def desktop_unavailable(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this machine can show no desktop notification at all, known before any is sent, or None.

    Linux without a session bus (a service, cron, ssh, CI) has nowhere to show one: the
    run's log says so once at its start, not as a failure at the end of every run.
    """
    environ = os.environ if environ is None else environ
    if sys.platform.startswith("linux") and not environ.get("DBUS_SESSION_BUS_ADDRESS"):
        return "no session bus (DBUS_SESSION_BUS_ADDRESS is not set)"
    return None


def notify_desktop(title: str, body: str) -> str:
    """Show one desktop notification; what showed it (for the run's log), else ``NotifyUnavailable``."""
    if sys.platform == "win32":
        return toast(title, body)
    if sys.platform == "darwin":
        return osascript_notification(title, body)
    if sys.platform.startswith("linux"):
        return freedesktop_notification(title, body, bus="SESSION")
    raise NotifyUnavailable(f"desktop notifications are not supported on {sys.platform}")


# --------------------------------------------------------------------------- Linux


def freedesktop_notification(title: str, body: str, *, bus: str) -> str:
    """``Notify`` on ``bus`` (``SESSION``, or an address); the server's id of the notification."""
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection
        from jeepney.wrappers import unwrap_msg
    except ImportError as error:
        raise NotifyUnavailable(f"jeepney is not installed ({error})") from error
    try:
        connection = open_dbus_connection(bus=bus)
    except KeyError as error:
        raise NotifyUnavailable(f"no session bus ({error} is not set)") from error
    except (OSError, ValueError, RuntimeError) as error:
        raise NotifyUnavailable(f"cannot reach the session bus: {error}") from error
    try:
        server = DBusAddress(NOTIFICATIONS_PATH, bus_name=NOTIFICATIONS_NAME, interface=NOTIFICATIONS_NAME)
        capabilities = unwrap_msg(
            connection.send_and_get_reply(new_method_call(server, "GetCapabilities"), timeout=DESKTOP_TIMEOUT)
        )[0]
        text = escape_markup(body) if "body-markup" in capabilities else body
        hints = {"urgency": ("y", URGENCY_NORMAL)}
        message = new_method_call(
            server,
            "Notify",
            "susssasa{sv}i",
            (APP_NAME, 0, "", title, text, [], hints, EXPIRE_DEFAULT),
        )
        reply = unwrap_msg(connection.send_and_get_reply(message, timeout=DESKTOP_TIMEOUT))
    except Exception as error:  # a D-Bus error (no notification server), a timeout
        raise NotifyUnavailable(f"the notification server did not take it: {error}") from error
    finally:
        connection.close()
    return f"org.freedesktop.Notifications (id {reply[0]})"


def escape_markup(text: str) -> str:
    """The body as plain text for a server that reads a small HTML subset (the spec's ``body-markup``)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# --------------------------------------------------------------------------- Windows


def powershell_path() -> str:
    """Windows PowerShell 5.1 (its WinRT types), not PowerShell 7 on PATH."""
    root = os.environ.get("SYSTEMROOT") or "C:\\Windows"
    return os.path.join(root, "System32", "WindowsPowerShell", "v1.0", "powershell.exe")


def toast_argv() -> list[str]:
    """``powershell.exe`` with the fixed toast script, encoded as PowerShell expects (UTF-16LE, base64)."""
    encoded = base64.b64encode(TOAST_SCRIPT.encode("utf-16-le")).decode("ascii")
    return [
        powershell_path(),
        "-NoProfile",
        "-NonInteractive",
        "-ExecutionPolicy",
        "Bypass",
        "-EncodedCommand",
        encoded,
    ]


def toast(title: str, body: str, run: Runner | None = None) -> str:
    """A Windows toast; the title and body go through the environment only."""
    env = {**os.environ, TOAST_TITLE_ENV: _one_line(title), TOAST_BODY_ENV: body.replace("\0", "")}
    _run_checked(toast_argv(), env, run or _run_hidden, "the toast")
    return "a Windows toast"


# --------------------------------------------------------------------------- macOS


def osascript_argv(title: str, body: str) -> list[str]:
    argv = [OSASCRIPT]
    for line in OSASCRIPT_LINES:
        argv += ["-e", line]
    return [*argv, _one_line(title), body]


def osascript_notification(title: str, body: str, run: Runner | None = None) -> str:
    _run_checked(osascript_argv(title, body), dict(os.environ), run or _run_hidden, "osascript")
    return "osascript"


# --------------------------------------------------------------------------- running


def _run_checked(argv: list[str], env: Mapping[str, str], run: Runner, what: str) -> None:
    try:
        done = run(argv, env)
    except subprocess.TimeoutExpired as error:
        raise NotifyUnavailable(f"{what} did not finish in {DESKTOP_TIMEOUT:g}s") from error
    except OSError as error:
        raise NotifyUnavailable(f"cannot run {argv[0]}: {error}") from error
    if done.returncode != 0:
        said = (done.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise NotifyUnavailable(
            f"{what} failed (exit status {done.returncode})" + (f": {said[-1]}" if said else "")
        )


def _run_hidden(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[bytes]:
    """Run with no console window (Windows) and nothing on our streams; killed at the timeout."""
    flags = CREATE_NO_WINDOW if sys.platform == "win32" else 0
    return subprocess.run(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=DESKTOP_TIMEOUT,
        creationflags=flags,
        check=False,
    )


def _one_line(text: str) -> str:
    return " ".join(text.replace("\0", "").split())
