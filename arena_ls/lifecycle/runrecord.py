"""The run record (contract 8.3): which code, interpreter, command and settings a run trained with.

``RunInfo.record`` is ``{git: {commit, dirty, diffSha256} | null, python: {path, version},
argv, manifestSha256, host, settings}``, made once by the server at the start (in a worker
thread: git is a process) and kept in the run's spec, so that a week later the checkpoint
still says which commit produced it.

- ``git``: asked by argument list, with ``GIT_TIMEOUT`` per call, never a prompt or a lock
  (``GIT_TERMINAL_PROMPT=0``, ``GIT_OPTIONAL_LOCKS=0``). ``dirty`` counts changes to tracked
  files (as ``git describe --dirty`` does: checkpoints and logs a trainer writes beside its
  script do not make a tree dirty); ``diffSha256`` is the SHA-256 of ``git diff HEAD
  --binary`` (null when clean), which tells two dirty runs apart. A workspace that is not a
  repository, a missing git, or git that does not answer in time: ``git`` is null (the last
  two with a log line).
- ``python``: the interpreter ``{python}`` stands for (the setting, as an argument list
  joined) and its version, known without running it: the server's own, a ``py -X.Y``
  launcher's flag, or a virtual environment's ``pyvenv.cfg``; else null.
- ``settings``: every server setting in force, by its dotted key, except ``clusters``
  (addresses and token files stay out of a record that may be shared).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform as python_platform
import re
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from arena_ls.setting_decl import declared_settings
from arena_ls.settings import Settings

log = logging.getLogger(__name__)

GIT_TIMEOUT = 5.0
"""Seconds each git call may take (a huge repository on a slow disk): then no git record."""
LEFT_OUT_SETTINGS = ("clusters",)


def git_record(root: Path, git: str = "git") -> dict[str, Any] | None:
    """``{commit, dirty, diffSha256}`` of the repository ``root`` is in, or None (see the module)."""
    inside = _git(git, root, ["rev-parse", "--is-inside-work-tree"])
    if inside is None or inside[0] != 0 or inside[1].strip() != b"true":
        return None
    head = _git(git, root, ["rev-parse", "--verify", "--quiet", "HEAD"])
    commit = head[1].decode("ascii", "replace").strip() if head is not None and head[0] == 0 else None
    status = _git(git, root, ["status", "--porcelain", "--untracked-files=no"])
    if status is None or status[0] != 0:
        return None
    dirty = bool(status[1].strip())
    digest = None
    if dirty and commit is not None:
        diff = _git(git, root, ["diff", "HEAD", "--binary"])
        digest = hashlib.sha256(diff[1]).hexdigest() if diff is not None and diff[0] == 0 else None
    return {"commit": commit, "dirty": dirty, "diffSha256": digest}


def _git(git: str, root: Path, words: list[str]) -> tuple[int, bytes] | None:
    """(exit status, stdout) of one git call in ``root``; None (logged) when git cannot answer."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            [git, *words],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        log.info("no git on this machine: the run records no commit")
        return None
    except subprocess.TimeoutExpired:
        log.warning("git %s did not answer within %gs: the run records no commit", words[0], GIT_TIMEOUT)
        return None
    except OSError as error:
        log.warning("git could not be run (%s): the run records no commit", error)
        return None
    return done.returncode, done.stdout


def python_record(python: Sequence[str]) -> dict[str, Any]:
    """``{path, version}`` of the interpreter ``{python}`` stands for (version None when unknown)."""
    return {"path": " ".join(python), "version": _python_version(python)}


def _python_version(python: Sequence[str]) -> str | None:
    if not python:
        return None
    first = python[0]
    if _same_file(first, sys.executable):
        return python_platform.python_version()
    for word in python[1:]:
        flag = re.fullmatch(r"-(\d+\.\d+)(?:-(?:32|64))?", word)  # the py launcher's -3.10
        if flag:
            return flag.group(1)
    return _pyvenv_version(Path(first))


def _same_file(one: str, other: str) -> bool:
    try:
        return os.path.samefile(one, other)
    except OSError:
        return False


def _pyvenv_version(executable: Path) -> str | None:
    """``version`` (or ``version_info``) of the ``pyvenv.cfg`` of a virtual environment's interpreter."""
    for folder in (executable.parent, executable.parent.parent):
        try:
            text = (folder / "pyvenv.cfg").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition("=")
            if key.strip() in ("version", "version_info") and value.strip():
                return value.strip()
    return None


def settings_record(settings: Settings) -> dict[str, Any]:
    """Every setting in force by its dotted key (``LEFT_OUT_SETTINGS`` left out), JSON values."""
    found = declared_settings(settings)
    return {
        item.declared.key: _plain(item.default)
        for item in found
        if item.declared.key not in LEFT_OUT_SETTINGS
    }


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


class RunRecorder(Protocol):
    """What makes a start's record (``run_record``; the supervisor is given it)."""

    def __call__(
        self, *, root: Path, python: Sequence[str], argv: Sequence[str], manifest: Path, settings: Settings
    ) -> dict[str, Any]: ...


def run_record(
    *, root: Path, python: Sequence[str], argv: Sequence[str], manifest: Path, settings: Settings
) -> dict[str, Any]:
    """The record of a run about to start (files and git: call it on a worker thread)."""
    return {
        "git": git_record(root),
        "python": python_record(python),
        "argv": list(argv),
        "manifestSha256": file_sha256(manifest),
        "host": socket.gethostname(),
        "settings": settings_record(settings),
    }
