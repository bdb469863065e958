"""file:// URIs and paths, both ways, through pygls's own conversion (POSIX and Windows).

VS Code sends Windows paths as ``file:///c%3A/Users/...``: pygls unquotes
them, lower-cases the drive letter and turns the slashes into backslashes
on Windows (``c:\\Users\\...``); UNC shares (``file://server/share/...``)
become ``\\\\server\\share\\...``. Paths go back the same way, so a URI the
server publishes names the file the editor has open.
"""

from __future__ import annotations

from pathlib import Path

from pygls import uris


def path_to_uri(path: str | Path) -> str:
    """The ``file:`` URI of a local path (made absolute first)."""
    absolute = Path(path).absolute()
    return fs_path_to_uri(str(absolute)) or absolute.as_uri()


def fs_path_to_uri(path: str) -> str | None:
    """The ``file:`` URI of an absolute path in this system's flavour, by pygls."""
    uri = uris.from_fs_path(path)  # type: ignore[no-untyped-call,unused-ignore]
    return str(uri) if uri else None


def uri_to_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI; None for any other scheme."""
    path = uris.to_fs_path(uri)
    return Path(path) if path else None
