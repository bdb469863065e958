"""Verifying a checkpoint before any resume (contract 8.2): a start that resumes, a relaunch, a rollback.

Three parts, kept apart so that the rules are pure and the disk is looked at in one place:

- ``candidates``: the checkpoints a resume may take, newest first (the job's recorded history
  and the run's own announcements, each ``(step, path)`` once, its latest announcement kept);
- ``judge``: the pure verdict on one checkpoint from one ``Reading`` of its file, in order:
  a path was announced; it exists; it is not being written (its size and mtime unchanged for
  ``QUIET_SECONDS``); its ``bytes`` match when announced; its ``sha256`` matches when
  announced. It passes as ``sha256``, ``bytes`` or ``exists``: the strongest check it had;
- ``read_checkpoint`` (the agent's look, like ``savedfiles.find_saved_file``): one stat, a
  second after the quiet window when the file changed within it, and the hash only when a
  ``sha256`` was announced and the size matched, read in chunks with a stop check between them
  (a stop request ends a long hash at once). ``verify`` walks the candidates newest first and
  stops at the first that passes: older files are never read.

A checkpoint that is a folder (Hugging Face's ``checkpoint-N``) is read as the sum of its files'
sizes and their newest mtime (``FOLDER_ENTRIES_LOOKED_AT`` at most); a ``sha256`` announced for
a folder cannot be checked and is not (the folder passes as ``bytes`` or ``exists``).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import attrs

from arena_ls.run.rundir import CheckpointRecord, ResumedFrom, SkippedCheckpoint

QUIET_SECONDS = 1.0
"""A file whose size or mtime changed within this long is being written, and is not resumed from."""
HASH_CHUNK = 1 << 20
FOLDER_ENTRIES_LOOKED_AT = 10_000
"""Of a checkpoint folder, how many entries are summed (a huge one costs no more)."""

SHA256 = "sha256"
BYTES = "bytes"
EXISTS = "exists"


@attrs.frozen
class Reading:
    """What the agent saw of one checkpoint's file (``read_checkpoint``)."""

    exists: bool
    size: int | None = None
    mtime_ns: int | None = None
    later_size: int | None = None
    """The size after the quiet window (None: the file was already quiet, no second look)."""
    later_mtime_ns: int | None = None
    is_folder: bool = False
    sha256: str | None = None
    """The file's hash, computed only when one was announced and the size matched."""
    error: str | None = None
    """Why the file could not be read (it then fails)."""
    stopped: bool = False
    """A stop request ended the look (the hash) before it was done."""


@attrs.frozen
class Passed:
    verified: str
    """``sha256``, ``bytes`` or ``exists``: the strongest check the checkpoint passed."""


@attrs.frozen
class Failed:
    why: str


Verdict = Passed | Failed


def judge(record: CheckpointRecord, reading: Reading | None) -> Verdict:
    """The verdict on ``record`` from ``reading`` (None: it has no path to read). Pure."""
    if reading is None or not record.path:
        return Failed("announced without a path: nothing to verify")
    if reading.stopped:
        return Failed("not verified: a stop request ended the check")
    if reading.error is not None:
        return Failed(f"could not be read: {reading.error}")
    if not reading.exists:
        return Failed("does not exist")
    if reading.later_size is not None and (
        reading.later_size != reading.size or reading.later_mtime_ns != reading.mtime_ns
    ):
        return Failed(f"is being written (its size or time changed within {QUIET_SECONDS:g} s)")
    if record.bytes is not None and reading.size != record.bytes:
        return Failed(f"is {reading.size} bytes, {record.bytes} announced: torn or replaced")
    if record.sha256 is not None and not reading.is_folder:
        if reading.sha256 != record.sha256:
            found = (reading.sha256 or "?")[:12]
            return Failed(f"sha256 {found}… differs from the announced {record.sha256[:12]}…: damaged")
        return Passed(SHA256)
    return Passed(BYTES if record.bytes is not None else EXISTS)


def candidates(
    history: Iterable[CheckpointRecord], announced: Iterable[CheckpointRecord], *, at_most: int | None = None
) -> list[CheckpointRecord]:
    """The checkpoints a resume may take, newest first: ``history`` (the job's, as the run began)
    and ``announced`` (the run's own, later), each ``(step, path)`` once with its latest
    announcement (a re-save at the same step replaces the older one's size and hash); a path
    announced again at a later step holds that later one, so the earlier is no candidate (a
    trainer overwriting one file); with ``at_most``, only those at that step or before (a
    rollback's bound, applied after: an overwritten file is never rolled back to). Pure."""
    latest: dict[tuple[int, str], CheckpointRecord] = {}
    for record in [*history, *announced]:
        key = (record.step, record.path)
        kept = latest.get(key)
        if kept is None or record.at >= kept.at:
            latest[key] = record
    newest_at_path: dict[str, CheckpointRecord] = {}
    for record in latest.values():
        held = newest_at_path.get(record.path)
        if held is None or (record.step, record.at) > (held.step, held.at):
            newest_at_path[record.path] = record
    kept_records = [
        r
        for r in latest.values()
        if (at_most is None or r.step <= at_most) and (not r.path or newest_at_path[r.path] is r)
    ]
    return sorted(kept_records, key=lambda r: (r.step, r.at), reverse=True)


@attrs.frozen
class Verification:
    """Where a resume goes: the newest checkpoint that passed (None: none did) and those skipped."""

    chosen: CheckpointRecord | None
    verified: str | None
    skipped: tuple[SkippedCheckpoint, ...] = ()
    interrupted: bool = False
    """A stop request ended the look: nothing was chosen, and the run stops (it did not fail)."""

    def resumed_from(self) -> ResumedFrom | None:
        """``RunInfo.resumedFrom`` for the chosen checkpoint (None when none passed)."""
        if self.chosen is None or self.verified is None:
            return None
        return ResumedFrom(self.chosen.step, self.chosen.path, self.verified, list(self.skipped))

    def evidence(self) -> str:
        """What failed, for ``resume-unknown`` when none passed (or what was taken and why)."""
        skipped = self._skipped_words()
        if self.chosen is None:
            if not skipped:
                return "no checkpoint is known to verify: nothing to resume from"
            return f"no checkpoint passed verification, none is resumed from (nothing overwritten): {skipped}"
        return skipped

    def _skipped_words(self) -> str:
        return "; ".join(f"step {s.step} ({s.path or 'no path'}) {s.why}" for s in self.skipped)

    def describe(self) -> str:
        """The run's ``arena`` line: which checkpoint a resume takes, and why."""
        if self.chosen is None:
            return "not resuming: " + self.evidence()
        taken = f"resuming from step {self.chosen.step} ({self.chosen.path}), verified by {self.verified}"
        if not self.skipped:
            return taken
        return f"{taken}; skipped {self._skipped_words()}"


Look = Callable[[CheckpointRecord], Reading | None]


def verify(ordered: Iterable[CheckpointRecord], look: Look) -> Verification:
    """The newest of ``ordered`` (newest first) that passes ``judge``; files after it are never read."""
    skipped: list[SkippedCheckpoint] = []
    for record in ordered:
        reading = look(record)
        if reading is not None and reading.stopped:
            return Verification(None, None, tuple(skipped), interrupted=True)
        verdict = judge(record, reading)
        if isinstance(verdict, Passed):
            return Verification(record, verdict.verified, tuple(skipped))
        skipped.append(SkippedCheckpoint(record.step, record.path, verdict.why))
    return Verification(None, None, tuple(skipped))


@attrs.define
class DiskLook:
    """The agent's look at checkpoint files under ``cwd`` (relative paths are the trainer's)."""

    cwd: Path
    should_stop: Callable[[], bool] = lambda: False
    """Asked between hash chunks: True ends the look (a stop request arrived)."""
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def __call__(self, record: CheckpointRecord) -> Reading | None:
        if not record.path:
            return None
        return read_checkpoint(self._resolve(record.path), record, self)

    def _resolve(self, path: str) -> Path:
        candidate = Path(path)
        return candidate if candidate.is_absolute() else self.cwd / candidate


def read_checkpoint(path: Path, record: CheckpointRecord, look: DiskLook) -> Reading:
    """One reading of ``path`` for ``judge`` (see the module docstring)."""
    try:
        first = _stat(path)
    except FileNotFoundError:
        return Reading(exists=False)
    except OSError as error:
        return Reading(exists=False, error=str(error))
    size, mtime_ns, is_folder = first
    later_size = later_mtime = None
    age = look.clock() - mtime_ns / 1e9
    if age < QUIET_SECONDS:  # changed within the window (or stamped in the future): look again after it
        look.sleep(QUIET_SECONDS if age < 0 else QUIET_SECONDS - age)
        try:
            later_size, later_mtime, _ = _stat(path)
        except OSError as error:
            return Reading(exists=True, size=size, mtime_ns=mtime_ns, error=str(error))
    reading = Reading(True, size, mtime_ns, later_size, later_mtime, is_folder)
    sized = record.bytes is None or record.bytes == size
    wants_hash = record.sha256 is not None and not is_folder and sized
    if not wants_hash or isinstance(judge(attrs.evolve(record, sha256=None), reading), Failed):
        return reading
    try:
        digest = _sha256(path, look.should_stop)
    except OSError as error:
        return attrs.evolve(reading, error=str(error))
    if digest is None:
        return attrs.evolve(reading, stopped=True)
    return attrs.evolve(reading, sha256=digest)


def _stat(path: Path) -> tuple[int, int, bool]:
    """(size, mtime in ns, is a folder): a folder's are its files' total and newest mtime."""
    info = path.stat()
    if not path.is_dir():
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


def _sha256(path: Path, should_stop: Callable[[], bool]) -> str | None:
    """The file's SHA-256, read in chunks; None when ``should_stop`` answered True between two."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            if should_stop():
                return None
    return digest.hexdigest()
