"""The manifest's text as the loaders read it: where each value sits, and the diagnostics reported there.

``ManifestDocument`` holds what the whole load shares: the text, the
positions ``json_source_map`` found, the diagnostics (all of them, and each
job's own), the workspace root and the manifest's ``roots``. The top-level
loader (``loader.py``) and the reader of one job (``job_reader.py``) both
report through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_ls.diagnostics import Diag, Severity, Span
from arena_ls.manifest.model import ClusterDecl


class ManifestDocument:
    """The manifest being loaded: its text, positions and diagnostics so far."""

    def __init__(self, text: str, path: Path, root: Path) -> None:
        self.text = text
        self.path = path
        self.root = root
        self.positions: dict[str, Any] = {}
        self.diags: list[Diag] = []
        self.per_job: dict[str, list[Diag]] = {}
        self.current: list[Diag] | None = None
        self.clusters: dict[str, ClusterDecl] = {}
        self.roots: tuple[Path, ...] = ()
        self.approval = "by-job"
        self._real: dict[Path, Path] = {}

    def resolve(self, path: Path) -> Path:
        """``path.resolve()``, once per path and load: 500 jobs named the same ``cwd`` and trainer,
        and resolving each again (a ``lstat`` per part of the path) was a third of a 500-job load
        (issue 38 item 7). A load reads the files as they are while it runs, so nothing kept here
        outlives it."""
        real = self._real.get(path)
        if real is None:
            real = self._real[path] = path.resolve()
        return real

    def inside(self, path: Path) -> bool:
        """True when ``path`` lies in the workspace or one of the manifest's ``roots``."""
        real = self.resolve(path)
        return any(_under(real, folder) for folder in (self.root, *self.roots))

    # -- reporting -------------------------------------------------------------------

    def span(self, pointer: str, *, key: bool = False) -> Span:
        entry = self.positions.get(pointer)
        while entry is None and pointer:
            pointer = pointer.rsplit("/", 1)[0]
            entry = self.positions.get(pointer)
        if entry is None:
            return Span(0, 0, 0, 0)
        if key and entry.key_start is not None:
            start, end = entry.key_start, entry.key_end
        else:
            start, end = entry.value_start, entry.value_end
        return Span(start.line, start.column, end.line, end.column)

    def report(
        self,
        code: str,
        message: str,
        pointer: str,
        severity: Severity = "error",
        key: bool = False,
        data: Any = None,
    ) -> None:
        diag = Diag(code, message, severity, self.span(pointer, key=key), path=str(self.path), data=data)
        self.diags.append(diag)
        if self.current is not None:
            self.current.append(diag)


def inside_folder(path: Path, root: Path) -> bool:
    """True when ``path`` (resolved) lies in ``root`` (already resolved)."""
    return _under(path.resolve(), root)


def _under(real: Path, root: Path) -> bool:
    try:
        real.relative_to(root)
    except ValueError:
        return False
    return True


def escape_pointer(key: str) -> str:
    """``key`` as one step of a JSON pointer (RFC 6901: ``~`` and ``/`` escaped)."""
    return key.replace("~", "~0").replace("/", "~1")


def edit_at(span: Span, new_text: str) -> dict[str, Any]:
    """A quick fix's text edit, in the wire's shape."""
    return {"range": span.to_wire(), "newText": new_text}
