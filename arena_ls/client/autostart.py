"""``arena autostart install|remove|status``: a per-user start at logon (contract 8.3).

At logon it runs ``arena resume-interrupted --root WORKSPACE``, which resumes (or offers)
the runs a restart of the machine interrupted, as ``watchdog.afterReboot`` says. One entry
per workspace, named after the workspace's path. Where it is registered is the platform's
(``arena_ls.platform``): Windows' Task Scheduler (``schtasks /Create /XML``, a logon trigger
for this user only, no elevation), a systemd user unit where a systemd user manager runs,
else an XDG autostart entry (``$XDG_CONFIG_HOME/autostart``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import attrs

from arena_ls import platform
from arena_ls.client.errors import CliError

AFTER_REBOOT_CHOICES = ("ask", "resume", "never")


def entry_name(root: Path) -> str:
    """``arena-resume-<folder>-<hash of the path>``: one per workspace, safe as a file and task name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", root.name).strip("-.")[:40] or "workspace"
    digest = hashlib.sha256(str(root).encode("utf-8", "surrogateescape")).hexdigest()[:10]
    return f"arena-resume-{slug}-{digest}"


def resume_command(root: Path, after_reboot: str | None = None, python: str | None = None) -> list[str]:
    """What runs at logon: this interpreter running ``arena resume-interrupted`` on ``root``."""
    argv = [
        python or sys.executable,
        "-m",
        "arena_ls.client.entry",
        "resume-interrupted",
        "--root",
        str(root),
    ]
    if after_reboot is not None:
        argv += ["--after-reboot", after_reboot]
    return argv


@attrs.define
class Autostart:
    """The logon entry of one workspace, on this platform (each platform call injectable)."""

    root: Path
    run: platform.Runner = platform.run_quietly
    kind: str = attrs.field(factory=platform.autostart_kind)
    environ: Mapping[str, str] = attrs.field(factory=lambda: dict(os.environ))

    @property
    def name(self) -> str:
        return entry_name(self.root)

    @property
    def task(self) -> str:
        """The Task Scheduler's path of the entry (in a folder of its own)."""
        return f"\\arena-ls\\{self.name}"

    @property
    def unit_file(self) -> Path:
        return platform.config_home(self.environ) / "systemd" / "user" / f"{self.name}.service"

    @property
    def desktop_file(self) -> Path:
        return platform.config_home(self.environ) / "autostart" / f"{self.name}.desktop"

    @property
    def description(self) -> str:
        return f"arena-ls: resume the runs a restart interrupted in {self.root}"

    def install(self, argv: list[str]) -> str:
        """Register ``argv`` to run at this user's logon (replacing an earlier entry); says where."""
        if self.kind == "task-scheduler":
            return self._install_task(argv)
        if self.kind == "systemd":
            _write_text(self.unit_file, platform.systemd_unit(self.description, argv, self.root))
            self._systemctl("daemon-reload")
            self._systemctl("enable", f"{self.name}.service")
            return f"systemd user unit {self.unit_file} (enabled)"
        _write_text(self.desktop_file, platform.desktop_entry(self.description, argv, self.root))
        return f"XDG autostart entry {self.desktop_file}"

    def remove(self) -> str | None:
        """Unregister the entry; what was removed, or None when there was none."""
        if self.kind == "task-scheduler":
            if not self._task_exists():
                return None
            self._checked(platform.schtasks_delete(self.task))
            return f"Task Scheduler task {self.task}"
        if self.kind == "systemd":
            if not self.unit_file.exists():
                return None
            self._systemctl("disable", f"{self.name}.service")
            self.unit_file.unlink()
            self._systemctl("daemon-reload")
            return f"systemd user unit {self.unit_file}"
        if not self.desktop_file.exists():
            return None
        self.desktop_file.unlink()
        return f"XDG autostart entry {self.desktop_file}"

    def status(self) -> str | None:
        """Where the entry is registered, or None when it is not."""
        if self.kind == "task-scheduler":
            return f"Task Scheduler task {self.task}" if self._task_exists() else None
        if self.kind == "systemd":
            if not self.unit_file.exists():
                return None
            enabled = self.run(["systemctl", "--user", "is-enabled", f"{self.name}.service"])
            state = (enabled.stdout or "").strip() or "unknown"
            return f"systemd user unit {self.unit_file} ({state})"
        return f"XDG autostart entry {self.desktop_file}" if self.desktop_file.exists() else None

    def _install_task(self, argv: list[str]) -> str:
        user = platform.windows_user(self.environ)
        xml = platform.task_scheduler_xml(self.description, argv, self.root, user)
        handle, name = tempfile.mkstemp(prefix="arena-task-", suffix=".xml")
        os.close(handle)
        path = Path(name)
        try:
            path.write_text(xml, encoding="utf-16")  # schtasks reads the XML as UTF-16
            self._checked(platform.schtasks_create(self.task, path))
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        return f"Task Scheduler task {self.task} (at logon of {user})"

    def _task_exists(self) -> bool:
        return self._call(platform.schtasks_query(self.task)).returncode == 0

    def _systemctl(self, *words: str) -> None:
        self._checked(["systemctl", "--user", *words])

    def _checked(self, argv: list[str]) -> None:
        done = self._call(argv)
        if done.returncode != 0:
            said = (done.stderr or done.stdout or "").strip().splitlines()
            why = said[-1] if said else f"exit status {done.returncode}"
            raise CliError(f"{' '.join(argv[:3])} failed: {why}")

    def _call(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        try:
            return self.run(argv)
        except (OSError, platform.TimeoutExpired) as error:
            raise CliError(f"cannot run {argv[0]}: {error}") from error


def _write_text(path: Path, text: str) -> None:
    """Write the entry whole (a temporary file, then a replace): never half an entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8", newline="\n")
    os.replace(partial, path)
