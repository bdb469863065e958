"""The checkpoint reader that runs on a cluster, where the trainer's files are (contract 8.2).

Standard library only: ``ckpt_remote`` ships this file's source as ``python -I -c SOURCE
REQUEST`` in a Ray job submitted with the run's own ``working_dir`` package, so relative paths
resolve in the folder the trainer ran in (Ray extracts one package URI to one folder per node),
and ``-I`` keeps a workspace file named like a standard module (``json.py``) out of its imports.

``REQUEST`` is JSON: ``{"candidates": [{"path", "bytes", "sha256"}], "quietSeconds",
"deadlineSeconds"}``, newest first. For each candidate it prints one line ``READING`` + JSON:
the same look as ``ckptverify.read_checkpoint`` (a stat; a second one after the quiet window
when the file changed within it; the hash only when a ``sha256`` was announced, the size
matched and the file was quiet, read in chunks). It stops after the first candidate that
passes those checks (older files are never read) and ends with ``END`` + ``{"readings": N}``:
output without that last line was cut short and is not trusted. The agent judges the readings
with ``ckptverify.judge``; nothing here decides a resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from typing import Any

READING = "@arena-ckpt-reading "
END = "@arena-ckpt-end "
HASH_CHUNK = 1 << 20
FOLDER_ENTRIES_LOOKED_AT = 10_000


def stat_of(path: str) -> tuple[int, int, bool]:
    """(size, mtime in ns, is a folder): a folder's are its files' total and newest mtime."""
    info = os.stat(path)
    if not os.path.isdir(path):
        return info.st_size, info.st_mtime_ns, False
    total, newest = 0, info.st_mtime_ns
    for index, (folder, _, files) in enumerate(os.walk(path)):
        if index >= FOLDER_ENTRIES_LOOKED_AT:
            break
        for name in files[:FOLDER_ENTRIES_LOOKED_AT]:
            try:
                entry = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            total += entry.st_size
            newest = max(newest, entry.st_mtime_ns)
    return total, newest, True


def sha256_of(path: str, deadline: float) -> str | None:
    """The file's SHA-256 in chunks; None when ``deadline`` (monotonic) passed before the end."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            if time.monotonic() > deadline:
                return None
    return digest.hexdigest()


def read(candidate: dict[str, Any], quiet: float, deadline: float) -> dict[str, Any]:
    """One reading of ``candidate["path"]`` (relative: to this job's folder, the trainer's)."""
    path = str(candidate["path"])
    reading: dict[str, Any] = {"path": path, "exists": False}
    try:
        size, mtime_ns, is_folder = stat_of(path)
    except FileNotFoundError:
        return reading
    except OSError as error:
        return {**reading, "error": str(error)}
    reading.update(exists=True, size=size, mtime_ns=mtime_ns, is_folder=is_folder)
    age = time.time() - mtime_ns / 1e9
    if age < quiet:  # changed within the window (or stamped in the future): look again after it
        time.sleep(quiet if age < 0 else quiet - age)
        try:
            later_size, later_mtime_ns, _ = stat_of(path)
        except OSError as error:
            return {**reading, "error": str(error)}
        reading.update(later_size=later_size, later_mtime_ns=later_mtime_ns)
        if (later_size, later_mtime_ns) != (size, mtime_ns):
            return reading
    announced_bytes = candidate.get("bytes")
    if candidate.get("sha256") is None or is_folder or announced_bytes not in (None, size):
        return reading
    try:
        digest = sha256_of(path, deadline)
    except OSError as error:
        return {**reading, "error": str(error)}
    if digest is None:
        return {**reading, "error": "the hash was not finished before the reader's deadline"}
    return {**reading, "sha256": digest}


def passes(candidate: dict[str, Any], reading: dict[str, Any]) -> bool:
    """Whether ``reading`` passes the checks ``ckptverify.judge`` makes (the reader stops there)."""
    if not reading["exists"] or reading.get("error") is not None:
        return False
    if "later_size" in reading and (reading["later_size"], reading["later_mtime_ns"]) != (
        reading["size"],
        reading["mtime_ns"],
    ):
        return False
    if candidate.get("bytes") not in (None, reading["size"]):
        return False
    announced = candidate.get("sha256")
    return announced is None or reading["is_folder"] or reading.get("sha256") == announced


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    quiet = float(request["quietSeconds"])
    deadline = time.monotonic() + float(request["deadlineSeconds"])
    count = 0
    for index, candidate in enumerate(request["candidates"]):
        reading = read(candidate, quiet, deadline)
        print(READING + json.dumps({"index": index, **reading}), flush=True)
        count += 1
        if passes(candidate, reading):
            break
    print(END + json.dumps({"readings": count}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
