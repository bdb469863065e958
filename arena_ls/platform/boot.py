"""The machine's boot and a pending restart (issue 37, contract 8.3): a boot id, the boot time,
the markers and registry keys that say an update waits for a restart."""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
"""Linux: a random id the kernel draws at every boot (``sd_id128_get_boot(3)``), not namespaced."""


def boot_id(path: Path = BOOT_ID_PATH) -> str | None:
    """This boot's id where the system has one (Linux); None elsewhere or when unreadable.

    Windows and macOS have no such id: their restarts are told by the boot time alone."""
    if sys.platform == "win32":
        return None
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return text or None


def boot_time() -> float | None:
    """When the machine booted, epoch seconds (``psutil.boot_time``), or None when unreadable.

    It is computed from the system clock: a clock step or NTP moves it (psutil's
    docstring; Windows smooths it by about a second), so it is compared with a tolerance."""
    import psutil  # see the module docstring

    try:
        return float(psutil.boot_time())
    except (OSError, RuntimeError, psutil.Error):
        return None


WINDOWS_REBOOT_KEYS = (
    r"SOFTWARE\Microsoft\Windows\CurrentVersion\Component Based Servicing\RebootPending",
    r"SOFTWARE\Microsoft\Windows\CurrentVersion\WindowsUpdate\Auto Update\RebootRequired",
)
"""Keys of HKLM whose presence says Windows waits for a restart (servicing, Windows Update)."""
SESSION_MANAGER_KEY = r"SYSTEM\CurrentControlSet\Control\Session Manager"
PENDING_RENAMES_VALUE = "PendingFileRenameOperations"
"""A value (not a key) of the session manager: files an installer renames at the next boot."""
LINUX_REBOOT_MARKERS = (Path("/var/run/reboot-required"), Path("/run/reboot-needed"))
"""Debian and Ubuntu's marker (policy 9.12), openSUSE's (zypp-boot-plugin)."""


def reboot_pending(
    *,
    registry: Any = None,
    markers: Sequence[Path] = LINUX_REBOOT_MARKERS,
    windows: bool | None = None,
) -> str | None:
    """What says the machine waits for a restart (an update installed), or None.

    ``registry`` replaces the ``winreg`` module and ``windows`` the platform (the tests
    read a faked registry on Linux); ``markers`` are the files a POSIX system leaves."""
    if windows is None:
        windows = sys.platform == "win32"
    if windows:
        return _windows_reboot_pending(registry if registry is not None else _winreg())
    for marker in markers:
        if marker.exists():
            return f"{marker} exists" + _pending_packages(marker)
    return None


def _pending_packages(marker: Path) -> str:
    """The packages that asked for the restart (Debian's ``reboot-required.pkgs``), shortly."""
    try:
        names = marker.with_name(marker.name + ".pkgs").read_text(errors="replace").split()
    except OSError:
        return ""
    if not names:
        return ""
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return f" (asked by {', '.join(sorted(set(names))[:3])}{more})"


def _winreg() -> Any:
    if sys.platform == "win32":
        import winreg

        return winreg
    raise OSError(errno.ENOSYS, "the Windows registry exists only on Windows")


def _windows_reboot_pending(registry: Any) -> str | None:
    """The three places Windows records a pending restart (HKLM, read-only, 64-bit view)."""
    for key in WINDOWS_REBOOT_KEYS:
        if _registry_read(registry, key, None) is not None:
            return f"HKLM\\{key} exists"
    renames = _registry_read(registry, SESSION_MANAGER_KEY, PENDING_RENAMES_VALUE)
    if renames:
        return f"HKLM\\{SESSION_MANAGER_KEY} has {PENDING_RENAMES_VALUE}"
    return None


def _registry_read(registry: Any, key: str, value: str | None) -> Any:
    """The key's handle as True (``value`` None) or the value's data; None when either is absent."""
    access = registry.KEY_READ | getattr(registry, "KEY_WOW64_64KEY", 0)
    try:
        handle = registry.OpenKey(registry.HKEY_LOCAL_MACHINE, key, 0, access)
    except OSError:
        return None
    try:
        if value is None:
            return True
        data, _kind = registry.QueryValueEx(handle, value)
        return data
    except OSError:
        return None
    finally:
        registry.CloseKey(handle)
