"""Why a workspace's manifest gives no jobs: missing, not JSON, or not loading.

``arena status`` of a workspace whose manifest is missing or broken listed
"no jobs in the manifest" and exited 0, the same as an empty manifest. The
server's ``arena/status`` lists jobs only; the client reads the file itself
(as ``arena check`` does) when the list is empty, and says which case it is
and where, so that the command can exit 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arena_ls.settings import Settings

DEFAULT_MANIFEST = Settings().manifest


def manifest_path(root: Path, settings: dict[str, Any]) -> Path:
    """The manifest the server reads: setting ``manifest`` (relative to ``root``), else the default."""
    given = settings.get("manifest")
    manifest = Path(given if isinstance(given, str) and given else DEFAULT_MANIFEST)
    return manifest if manifest.is_absolute() else root / manifest


def manifest_problem(path: Path, root: Path) -> str | None:
    """What keeps the manifest from giving jobs, in words with its place; None when it loads."""
    if not path.exists():
        return f'there is no manifest: {path} does not exist (README: "Add your own job")'
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        return f"cannot read the manifest {path}: {error.strerror or error}"
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return (
            f"the manifest {path} is not valid JSON (line {error.lineno}, column {error.colno}: "
            f"{error.msg}); see `arena check`"
        )
    except RecursionError:
        return f"the manifest {path} is not valid JSON (nested too deeply); see `arena check`"
    return loading_problem(path, root)


def loading_problem(path: Path, root: Path) -> str | None:
    """The first error of a manifest that parses but does not load (no job loads)."""
    from arena_ls.manifest import load_manifest  # the loader only when the file is suspect: start-up speed

    result = load_manifest(path, root)
    if not result.fatal:
        return None
    errors = result.errors
    if not errors:
        return f"the manifest {path} does not load; see `arena check`"
    first = errors[0]
    return (
        f"the manifest {path} does not load: {first.code} line {first.span.line + 1}: "
        f"{first.message}; see `arena check`"
    )
