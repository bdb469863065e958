"""One parsed manifest per content: a layer around ``load_manifest`` shared by every reader.

Status, diagnostics, lenses, insights and starts all ask for the manifest,
some of them several times a second. Parsing it is not cheap (about half a
millisecond a job, so 250 ms for 500 jobs and seconds for a 20 MB file), so
it is parsed once per content, keyed by the SHA-256 of its text, and the
file is read again only when its ``stat`` signature changes.

What a load says also depends on other files (a ``script`` that does not
exist yet is AR107, a link that leaves the workspace AR110), which no hash of
the manifest sees. So a cached result is *revalidated*: once it is older
than ``revalidate_after`` (5 s, or 20 times what the load took, so that
revalidating a huge manifest costs at most about 5 % of a core), the next
asynchronous reader gets it at once and a fresh load runs in a worker
thread; ``invalidate`` (a file was saved) makes every result due at once,
and a start asks for a result no older than a second.

The synchronous ``get`` never waits for a revalidation: it parses only when
there is nothing cached for the file's current signature. The asynchronous
``get_async`` parses in a worker thread, so the event loop never runs a
parse of the file on disk.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import attrs

from arena_ls.manifest.loader import ManifestResult, load_manifest, load_manifest_text

REVALIDATE_SECONDS = 5.0
"""A result older than this is loaded again (in the background) at the next asynchronous ask."""
REVALIDATE_COST_FACTOR = 20.0
"""...or, for a manifest that takes long to load, older than this many times its load."""
KEEP_RESULTS = 8
"""Parsed manifests kept (the file on disk, an open buffer or two, their recent versions)."""

Signature = tuple[int, int, int, int] | None
"""(mtime_ns, size, inode, ctime_ns) of the manifest file; None when it cannot be read."""
Place = tuple[str, str, str]
"""(manifest path, workspace root, state folder): what a load depends on besides the text."""


@attrs.define
class _Parsed:
    result: ManifestResult
    loaded_at: float
    cost: float
    """Seconds the load took (sets how often it is revalidated)."""


@attrs.define
class _OnDisk:
    signature: Signature
    digest: str


def text_digest(text: str) -> str:
    """The key of a manifest's text (a buffer's, or the file's as read)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def file_signature(path: Path) -> Signature:
    try:
        stat = os.stat(path)
    except (OSError, ValueError):
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino, stat.st_ctime_ns)


class ManifestCache:
    """Parsed manifests by content (see the module docstring); safe to use from worker threads."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._parsed: OrderedDict[tuple[str, Place], _Parsed] = OrderedDict()
        self._disk: dict[Place, _OnDisk] = {}
        self._refreshing: dict[Place, asyncio.Task[ManifestResult]] = {}
        self._parsing: dict[tuple[str, Place], threading.Event] = {}
        """The parses under way, by (text's digest, place): a second reader waits for the first."""
        self.loads = 0
        """How many times a manifest was parsed (tests and benchmarks read it)."""

    # -- the file on disk ----------------------------------------------------------------

    def get(
        self, path: Path, root: Path, state_dir: Path | None, *, revalidate: bool = False
    ) -> ManifestResult:
        """The manifest file as it is now; parses here only when its content is new, or (with
        ``revalidate``, in a worker thread) when the cached result is due for revalidation."""
        place = _place(path, root, state_dir)
        cached = self._cached_for(place, file_signature(path))
        if cached is not None and not (
            revalidate and self.clock() - cached.loaded_at > self._revalidate_after(cached)
        ):
            return cached.result
        if cached is not None:
            self.invalidate_place(place)
        return self._load_file(place, path, root, state_dir)

    async def get_async(
        self, path: Path, root: Path, state_dir: Path | None, *, max_age: float | None = None
    ) -> ManifestResult:
        """``get``, with any parse in a worker thread; a result due for revalidation is answered
        at once while a fresh load runs behind it, unless it is older than ``max_age``."""
        place = _place(path, root, state_dir)
        cached = self._cached_for(place, file_signature(path))
        if cached is not None:
            age = self.clock() - cached.loaded_at
            if max_age is not None and age > max_age:
                return await self._refresh(place, path, root, state_dir)
            if age > self._revalidate_after(cached):
                self._start_refresh(place, path, root, state_dir)
            return cached.result
        return await self._refresh(place, path, root, state_dir)

    def invalidate(self) -> None:
        """Something on disk changed (a file was saved): every result is due for revalidation."""
        with self._lock:
            for parsed in self._parsed.values():
                parsed.loaded_at = -float("inf")

    # -- a buffer's text -----------------------------------------------------------------

    def get_text(self, text: str, path: Path, root: Path, state_dir: Path | None) -> ManifestResult:
        """The manifest an editor buffer holds (``load_manifest_text``), once per content.

        Meant for a worker thread (the diagnostics pass): a new text is parsed here.
        """
        place = _place(path, root, state_dir)
        digest = text_digest(text)
        with self._lock:
            parsed = self._parsed.get((digest, place))
            if parsed is not None and self.clock() - parsed.loaded_at <= self._revalidate_after(parsed):
                self._parsed.move_to_end((digest, place))
                return parsed.result
        return self._parse_once(
            digest, place, lambda: load_manifest_text(text, path, root, state_dir=state_dir)
        )

    # -- inside ----------------------------------------------------------------------------

    def _revalidate_after(self, parsed: _Parsed) -> float:
        return max(REVALIDATE_SECONDS, REVALIDATE_COST_FACTOR * parsed.cost)

    def _cached_for(self, place: Place, signature: Signature) -> _Parsed | None:
        """The parse of the file as it was when its signature was last ``signature``."""
        if signature is None:
            return None
        with self._lock:
            disk = self._disk.get(place)
            if disk is None or disk.signature != signature:
                return None
            parsed = self._parsed.get((disk.digest, place))
            if parsed is not None:
                self._parsed.move_to_end((disk.digest, place))
            return parsed

    def _load_file(self, place: Place, path: Path, root: Path, state_dir: Path | None) -> ManifestResult:
        """Read the file, reuse the parse of the same text if it is fresh, else load it."""
        signature = file_signature(path)  # before the read: a write during it shows as a new signature
        try:
            text = path.read_bytes().decode("utf-8", "replace")
        except (OSError, ValueError):
            text = None
        started = self.clock()
        if text is None:
            return load_manifest(path, root, state_dir=state_dir)  # its AR101 (never cached)
        digest = text_digest(text)
        with self._lock:
            parsed = self._parsed.get((digest, place))
            fresh = parsed is not None and started - parsed.loaded_at <= self._revalidate_after(parsed)
        if parsed is not None and fresh:
            result = parsed.result
        else:
            result = self._parse_once(digest, place, lambda: load_manifest(path, root, state_dir=state_dir))
        with self._lock:
            self._disk[place] = _OnDisk(signature, digest)
        return result

    def _parse_once(self, digest: str, place: Place, parse: Callable[[], ManifestResult]) -> ManifestResult:
        """``parse()``, unless another thread is parsing the same text for the same place: then its
        result. A status asked while the diagnostics pass parsed the open manifest (the same text)
        parsed it a second time, and 500 jobs cost each of them half a second (issue 38 item 7)."""
        key = (digest, place)
        with self._lock:
            running = self._parsing.get(key)
            if running is None:
                running = self._parsing[key] = threading.Event()
                mine = True
            else:
                mine = False
        if not mine:
            running.wait()
            with self._lock:
                parsed = self._parsed.get(key)
            if parsed is not None:
                return parsed.result
            return parse()  # the other parse failed: this one says why
        try:
            started = self.clock()
            result = parse()
            self._store(digest, place, result, started)
            return result
        finally:
            with self._lock:
                del self._parsing[key]
            running.set()

    def _store(self, digest: str, place: Place, result: ManifestResult, started: float) -> None:
        now = self.clock()
        with self._lock:
            self.loads += 1
            self._parsed[(digest, place)] = _Parsed(result, started, now - started)
            self._parsed.move_to_end((digest, place))
            while len(self._parsed) > KEEP_RESULTS:
                self._parsed.popitem(last=False)

    def _start_refresh(self, place: Place, path: Path, root: Path, state_dir: Path | None) -> None:
        if place not in self._refreshing:
            self._spawn(place, path, root, state_dir)

    async def _refresh(self, place: Place, path: Path, root: Path, state_dir: Path | None) -> ManifestResult:
        task = self._refreshing.get(place) or self._spawn(place, path, root, state_dir)
        return await asyncio.shield(task)

    def _spawn(
        self, place: Place, path: Path, root: Path, state_dir: Path | None
    ) -> asyncio.Task[ManifestResult]:
        def load() -> ManifestResult:
            self.invalidate_place(place)
            return self._load_file(place, path, root, state_dir)

        task = asyncio.get_running_loop().create_task(asyncio.to_thread(load))
        self._refreshing[place] = task
        task.add_done_callback(lambda done: self._refresh_done(place, done))
        return task

    def _refresh_done(self, place: Place, task: asyncio.Task[ManifestResult]) -> None:
        if self._refreshing.get(place) is task:
            del self._refreshing[place]
        if not task.cancelled():
            task.exception()  # retrieved: a failed background load is the next reader's to see

    def invalidate_place(self, place: Place) -> None:
        """The parse of ``place``'s file is to be made again (a revalidation): forget its freshness."""
        with self._lock:
            disk = self._disk.get(place)
            parsed = self._parsed.get((disk.digest, place)) if disk is not None else None
            if parsed is not None:
                parsed.loaded_at = -float("inf")


def _place(path: Path, root: Path, state_dir: Path | None) -> Place:
    return (str(path), str(root), str(state_dir) if state_dir is not None else "")
