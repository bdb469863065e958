"""The trust boundary at exec time: the gated paths again, right before each launch.

The gates and AR110 look at a job's files when the server starts it. A
trainer swapped for a link to an outside script after that (once
``spec.json`` appears, or between a crash and the watchdog's relaunch)
would run code nobody checked. So the server records, in the run's spec
(``execCheck``), the folders a job may take its files from (the workspace
first, then the manifest's ``roots`` of contract 7.3) and every gated path
that lay inside them, with the content hash of the files the gates read;
and whatever execs the trainer (the launcher, cold or spare, and the agent
for each relaunch) calls ``verify_exec`` immediately before the exec. A
path whose real path now leaves those folders, a file whose content changed,
or one that is gone, is refused with the evidence: nothing is started.

The paths checked: the job's ``cwd``, its ``script``, the command when it
is a path inside the folders (``{python}`` and names found on ``PATH`` are
the owner's, not gated), and every argument that names an existing file or
folder inside them (AR110's). Files hashed: the script, a command inside
the folders, and the ``.py`` files among the arguments (what the gates
read); data files and folders are checked by their real path only (hashing
a 10 GB data set before each relaunch is not a check anyone wants).

Standard library only: ``trainer_start`` (which the launcher imports
before anything heavy) calls it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

HASH_LIMIT = 64 << 20
"""Files larger than this are checked by their real path only."""


class ExecRefused(OSError):
    """A gated path changed since the gates passed; ``str()`` is the evidence."""


def exec_check(
    cwd: str,
    argv: Sequence[str],
    script: str | None,
    roots: Sequence[str],
    *,
    command_is_path: bool,
    judged: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """What ``spec.json`` records as ``execCheck`` for a run of ``argv`` in ``cwd``.

    ``roots``: the folders the job may take files from, the workspace first.
    ``command_is_path``: the manifest's ``command`` names a path (not ``{python}``).
    ``judged``: the SHA-256 of the bytes the gates judged, by real path (issue 39): recorded as is,
    not hashed again, so that the exec runs only the bytes the gates passed.
    """
    judged_real = {os.path.realpath(path): digest for path, digest in (judged or {}).items()}
    real_roots = [os.path.realpath(root) for root in roots]
    paths: list[dict[str, Any]] = []
    seen: set[str] = set()

    def gate(path: str, *, hashed: bool) -> None:
        path = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
        if path in seen or not os.path.exists(path):
            return
        real = os.path.realpath(path)
        if not _inside(real, real_roots):
            return  # outside at start: AR110's to refuse, or the owner's interpreter
        seen.add(path)
        digest = judged_real.get(real) or (_digest(real) if hashed and os.path.isfile(real) else None)
        paths.append({"path": path, "real": real, "sha256": digest})

    gate(cwd, hashed=False)
    if script is not None:
        gate(script, hashed=True)
    if command_is_path and argv:
        gate(argv[0], hashed=True)
    for arg in argv[1:]:
        if _may_name_a_path(arg):
            gate(arg, hashed=arg.endswith(".py"))
    return {"roots": real_roots, "paths": paths}


def exec_refusal(check: Mapping[str, Any] | None) -> str | None:
    """Why the trainer must not be started now (the evidence), or None. No ``check``: nothing to do
    (a spec written before this existed)."""
    if not check:
        return None
    roots = [str(root) for root in check.get("roots") or []]
    where = "the workspace" if len(roots) <= 1 else "the workspace and the manifest's roots"
    for entry in check.get("paths") or []:
        path, before = str(entry.get("path")), str(entry.get("real"))
        if not os.path.exists(path):
            return f"{path} is gone since the gates passed; nothing was started"
        real = os.path.realpath(path)
        if not _inside(real, roots):
            return (
                f"{path} now leads to {real}, outside {where} (it was {before} when the gates "
                "passed); nothing was started"
            )
        expected = entry.get("sha256")
        if expected:
            now = _digest(real)
            if now != expected:
                return (
                    f"{path} changed since the gates passed (sha256 {str(expected)[:12]}… now "
                    f"{(now or 'unreadable')[:12]}…); nothing was started: start the job again to gate it"
                )
    return None


def verify_exec(check: Mapping[str, Any] | None) -> None:
    """``ExecRefused`` with the evidence when ``exec_refusal`` refuses; called right before the exec."""
    refused = exec_refusal(check)
    if refused is not None:
        raise ExecRefused(refused)


def _may_name_a_path(arg: str) -> bool:
    return bool(arg) and not arg.startswith("-") and "\0" not in arg and len(arg) <= 4096


def _inside(real: str, roots: Sequence[str]) -> bool:
    for root in roots:
        try:
            if os.path.commonpath([real, root]) == root:
                return True
        except ValueError:  # another drive (Windows), or a mix of absolute and relative
            continue
    return False


def _digest(path: str) -> str | None:
    try:
        if os.path.getsize(path) > HASH_LIMIT:
            return None
        hasher = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                hasher.update(block)
        return hasher.hexdigest()
    except OSError:
        return "unreadable"
