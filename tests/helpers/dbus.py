"""A real D-Bus for the laptop's tests (contract 8.3): a ``dbus-daemon`` of the test's own, and two
small services on it written with jeepney, standing in for logind and for a notification server.

- ``DBusDaemon``: ``dbus-daemon --session`` on a socket in the test's folder (Debian package ``dbus``,
  installed by scripts/test.sh); its address goes to the agent as ``ARENA_LOGIND_BUS_ADDRESS``
  (the inhibitor) or ``DBUS_SESSION_BUS_ADDRESS`` (notifications).
- ``FakeLogind``: ``org.freedesktop.login1.Manager.Inhibit`` as logind answers it: a file descriptor
  (the write end of a pipe), whose every copy closing (an explicit close, the process's death) is
  the lock's release; the service watches the read end and records both.
- ``FakeNotifications``: ``org.freedesktop.Notifications`` ``Notify`` and ``GetCapabilities``,
  recording each notification.

Each service answers on a thread of its own; ``wait_until`` waits for what they record.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import attrs
from jeepney import HeaderFields, MessageType, new_error, new_method_return
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import DBusConnection, open_dbus_connection

from tests.helpers.waiting import wait_until

DBUS_DAEMON = shutil.which("dbus-daemon")
RECEIVE_SECONDS = 0.2
"""How long a service's receive waits before it looks whether it should stop."""


class DBusDaemon:
    """A ``dbus-daemon`` of the test's own; ``address`` is what a client connects to."""

    def __init__(self, folder: Path) -> None:
        if DBUS_DAEMON is None:
            raise RuntimeError(
                "dbus-daemon is not installed (Debian package dbus: scripts/test.sh installs it)"
            )
        socket = folder / "bus"
        self.process = subprocess.Popen(
            [DBUS_DAEMON, "--session", "--nofork", "--nopidfile", f"--address=unix:path={socket}",
             "--print-address=1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        assert self.process.stdout is not None
        self.address = self.process.stdout.readline().decode().strip()
        if not self.address:
            self.close()
            raise RuntimeError("dbus-daemon did not start")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Service:
    """A bus name served on a thread: ``handle`` answers each method call."""

    name = ""

    def __init__(self, address: str) -> None:
        self.connection: DBusConnection = open_dbus_connection(bus=address, enable_fds=True)
        reply = self.connection.send_and_get_reply(message_bus.RequestName(self.name), timeout=10)
        assert reply.body == (1,), f"could not own {self.name}: {reply.body}"
        self._stop = threading.Event()
        self.lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                message = self.connection.receive(timeout=RECEIVE_SECONDS)
            except TimeoutError:
                continue
            except (OSError, ValueError):
                return
            if message.header.message_type is MessageType.method_call:
                member = message.header.fields.get(HeaderFields.member)
                try:
                    reply = self.handle(str(member), message)
                    if reply is not None:
                        self.connection.send(reply)
                except Exception as error:  # answered as a D-Bus error: the caller sees it
                    self.connection.send(new_error(message, "org.arena.Test.Error", "s", (str(error),)))

    def handle(self, member: str, message: Any) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.connection.close()


@attrs.define
class Inhibition:
    """One ``Inhibit`` call, and whether the lock it gave out was released."""

    what: str
    who: str
    why: str
    mode: str
    released: threading.Event = attrs.field(factory=threading.Event)


class FakeLogind(Service):
    """``org.freedesktop.login1`` with the ``Inhibit`` call of its ``Manager``."""

    name = "org.freedesktop.login1"

    def __init__(self, address: str) -> None:
        self.inhibitions: list[Inhibition] = []
        self.refuse: str | None = None
        """Set: ``Inhibit`` answers a D-Bus error with this text (as logind does when polkit refuses)."""
        super().__init__(address)

    def handle(self, member: str, message: Any) -> Any:
        if member != "Inhibit":
            raise ValueError(f"unknown method {member}")
        if self.refuse is not None:
            raise PermissionError(self.refuse)
        inhibition = Inhibition(*message.body)
        read_end, write_end = os.pipe()
        threading.Thread(target=self._watch, args=(read_end, inhibition), daemon=True).start()
        with self.lock:
            self.inhibitions.append(inhibition)
        reply = new_method_return(message, "h", (write_end,))
        self.connection.send(reply)
        os.close(write_end)  # sent: the caller's copies are the only ones left
        return None

    @staticmethod
    def _watch(read_end: int, inhibition: Inhibition) -> None:
        """The lock is released when every copy of its write end is closed: the read end sees EOF."""
        try:
            while os.read(read_end, 1024):
                pass
        finally:
            os.close(read_end)
            inhibition.released.set()

    def wait_for_inhibitions(self, count: int) -> list[Inhibition]:
        def enough() -> list[Inhibition] | None:
            with self.lock:
                return list(self.inhibitions) if len(self.inhibitions) >= count else None

        return wait_until(enough, f"{count} Inhibit call(s)")


class FakeNotifications(Service):
    """``org.freedesktop.Notifications``: every ``Notify`` recorded, ids counted from 1."""

    name = "org.freedesktop.Notifications"

    def __init__(self, address: str, capabilities: tuple[str, ...] = ("body",)) -> None:
        self.capabilities = list(capabilities)
        self.notifications: list[dict[str, Any]] = []
        super().__init__(address)

    def handle(self, member: str, message: Any) -> Any:
        if member == "GetCapabilities":
            return new_method_return(message, "as", (self.capabilities,))
        if member == "Notify":
            app, _replaces, _icon, summary, body, _actions, hints, timeout = message.body
            with self.lock:
                self.notifications.append(
                    {"app": app, "summary": summary, "body": body, "hints": hints, "timeout": timeout}
                )
                number = len(self.notifications)
            return new_method_return(message, "u", (number,))
        raise ValueError(f"unknown method {member}")

    def received(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.notifications)
