"""The process marker's verdicts kept between runs, keyed by the hashes of the source they read.

Reading every test's reach through ``arena_ls/`` and ``tests/`` is most of the fast lane's
collection (7 s of 14 s on a quiet two-core machine, 30 s with the machine loaded). The
verdicts only change when the source does, so they are kept in a file under the user's
cache folder (``$XDG_CACHE_HOME/arena-ls/``, else ``~/.cache/arena-ls/``), one per clone:

- **shared**: one hash over every followed module that is not a test file (``arena_ls/``,
  ``benchmarks/``, ``tests/helpers/``, every ``conftest.py``, this marker itself). Any change
  there drops every verdict: a helper may now start a process for any test.
- **per test file**: the hash of the file and of the test files it imports (a test module may
  borrow another's helper). A change there re-reads that file's tests alone, which is the
  common case while writing a test.

A verdict is only ever reused for byte-identical source, so the marks are those a full reading
gives; and the guard still fails any unmarked test that starts a process. ``ARENA_PROCESS_CACHE=0``
reads everything afresh. Writes are atomic (a temporary file and ``os.replace``): pytest-xdist's
workers collect at the same time, and the last one to finish wins with the same content.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

VERSION = 1
FOLLOWED = ("tests", "arena_ls", "benchmarks")
_TEST_IMPORT = re.compile(r"\btests((?:\.\w+)+)")
_MISSING: Any = object()


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "arena-ls"


def is_test_file(path: Path) -> bool:
    return path.name.startswith("test_") and path.suffix == ".py"


def shared_fingerprint(repo: Path) -> str:
    """One hash over every followed module that is not a test file (paths and bytes)."""
    digest = hashlib.sha256(f"v{VERSION}".encode())
    for top in FOLLOWED:
        for path in sorted((repo / top).rglob("*.py")):
            if is_test_file(path):
                continue
            digest.update(str(path.relative_to(repo)).encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


class MarkCache:
    """Verdicts (``why`` or None) by test id, valid while their source hashes match."""

    def __init__(self, repo: Path, file: Path | None = None) -> None:
        self.repo = repo
        name = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:16]
        self.file = file or cache_folder() / f"process-marks-{name}.json"
        self.shared = shared_fingerprint(repo)
        self._files: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, str] = {}
        self._resolved_repo = repo.resolve()
        self._relatives: dict[Path, str | None] = {}
        """Each test file's path in the clone, resolved once (not once per test: 4 of
        ``Path.resolve``'s system calls for each of 2,800 tests were 0.35 s of a collection)."""
        self.changed = False
        self._read()

    def _read(self) -> None:
        try:
            stored = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(stored, dict) or stored.get("version") != VERSION:
            return
        if stored.get("shared") != self.shared or not isinstance(stored.get("files"), dict):
            return
        self._files = {k: v for k, v in stored["files"].items() if isinstance(v, dict)}

    def file_key(self, path: Path) -> str | None:
        """The hash of a test file and the test files it imports; None outside this clone."""
        relative = self._relative_or_none(path)
        if relative is None:
            return None
        if relative not in self._keys:
            self._keys[relative] = self._hash_with_imports(path)
        return self._keys[relative]

    def _hash_with_imports(self, path: Path) -> str:
        text = path.read_bytes()
        digest = hashlib.sha256(text)
        for dotted in sorted(set(_TEST_IMPORT.findall(text.decode("utf-8", "replace")))):
            imported = self.repo.joinpath("tests", *dotted.strip(".").split(".")).with_suffix(".py")
            if is_test_file(imported) and imported.resolve() != path.resolve() and imported.is_file():
                digest.update(imported.read_bytes())
        return digest.hexdigest()

    def get(self, path: Path, test_id: str) -> Any:
        """The kept verdict (a string or None), or ``MISSING`` when it must be read."""
        key = self.file_key(path)
        if key is None:
            return _MISSING
        entry = self._files.get(self._relative(path))
        if entry is None or entry.get("key") != key:
            return _MISSING
        marks = entry.get("marks")
        if not isinstance(marks, dict) or test_id not in marks:
            return _MISSING
        return marks[test_id]

    def put(self, path: Path, test_id: str, why: str | None) -> None:
        key = self.file_key(path)
        if key is None:
            return
        relative = self._relative(path)
        entry = self._files.get(relative)
        if entry is None or entry.get("key") != key:
            entry = self._files[relative] = {"key": key, "marks": {}}
        entry["marks"][test_id] = why
        self.changed = True

    def _relative(self, path: Path) -> str:
        relative = self._relative_or_none(path)
        if relative is None:
            raise ValueError(f"{path} is not in {self.repo}")
        return relative

    def _relative_or_none(self, path: Path) -> str | None:
        if path not in self._relatives:
            try:
                self._relatives[path] = str(path.resolve().relative_to(self._resolved_repo))
            except ValueError:
                self._relatives[path] = None
        return self._relatives[path]

    def save(self) -> None:
        if not self.changed:
            return
        data = {"version": VERSION, "shared": self.shared, "files": self._files}
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.file.parent, prefix=".marks-", suffix=".json")
        except OSError:
            return  # a read-only home: the next run reads the source again
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(data, out)
            os.replace(temporary, self.file)
        except OSError:
            Path(temporary).unlink(missing_ok=True)
            return
        self.changed = False


def is_missing(value: Any) -> bool:
    return value is _MISSING


def enabled() -> bool:
    return os.environ.get("ARENA_PROCESS_CACHE", "1") != "0"
