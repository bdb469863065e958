"""Writing a JSON file so that every reader sees the old file or the new one, never half.

Standard library and ``platform`` only: the agent's entry point records the
run's first state with it before the agent's heavier imports are loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from arena_ls import platform


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON so that readers see the old file or the new one, never half.

    Temporary file in the same folder, fsync, then rename over the target
    (``platform.replace_file``: through readers' open handles on Windows,
    sharing violations retried).
    """
    data = json_bytes(payload)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        platform.replace_file(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def json_bytes(payload: Any) -> bytes:
    """The bytes ``write_json_atomic`` writes for ``payload``."""
    return json.dumps(payload, indent=1, allow_nan=False, default=str).encode()
