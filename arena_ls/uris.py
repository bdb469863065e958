"""file:// URIs and paths, both ways, on POSIX and Windows."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse
from urllib.request import url2pathname


def path_to_uri(path: str | Path) -> str:
    return Path(path).absolute().as_uri()


def uri_to_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI; None for any other scheme."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(url2pathname(parsed.path))
