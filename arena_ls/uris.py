"""file:// URIs and paths, both ways, on POSIX and Windows."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlparse


def path_to_uri(path: str | Path) -> str:
    return Path(path).absolute().as_uri()


def uri_to_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI; None for any other scheme."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    return Path(_url2pathname(parsed.path))


def _url2pathname(path: str) -> str:
    """``urllib.request.url2pathname`` without importing urllib.request (ssl, http, email)."""
    if os.name == "nt":
        from nturl2path import url2pathname

        return url2pathname(path)
    return unquote(path)
