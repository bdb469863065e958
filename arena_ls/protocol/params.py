"""Params of the custom methods, checked field by field at the boundary.

pygls hands custom-method params over as plain JSON (see ``converter.py``);
here they become typed requests, and anything else becomes an
``InvalidParams`` whose message names the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arena_ls.errors import InvalidParams
from arena_ls.lifecycle.supervisor import StartRequest, StopRequest

Checker = Callable[[Any], bool]

MAX_INT = 2**31 - 1
"""LSP's ``integer``: counts and steps beyond it are refused, not carried around."""
MAX_SECONDS = 7 * 24 * 3600.0
MAX_CURSOR_CHARS = 4096
"""Our cursors are a few hundred characters; anything much longer is not one of ours."""


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT


def _is_positive_int(value: Any) -> bool:
    return _is_count(value) and value > 0


def _is_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_SECONDS


def _is_cursor(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_CURSOR_CHARS


def _is_resume(value: Any) -> bool:
    return isinstance(value, bool) or value == "auto"


def as_object(raw: Any, method: str, *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The params object; None counts as ``{}`` unless a field is required.

    So does ``[]``: Neovim encodes an empty Lua table as an empty array.
    """
    if raw is None or raw == []:
        if required:
            raise InvalidParams(f"{method}: params must be an object with field `{required[0]}`")
        return {}
    if not isinstance(raw, dict):
        kind = "an array" if isinstance(raw, list) else type(raw).__name__
        raise InvalidParams(f"{method}: params must be an object, not {kind}")
    for name in required:
        if name not in raw or raw[name] is None:
            raise InvalidParams(f"{method}: field `{name}` is required")
    return raw


def field(params: dict[str, Any], name: str, check: Checker, expected: str, default: Any = None) -> Any:
    """One optional field; null means absent."""
    value = params.get(name)
    if value is None:
        return default
    if not check(value):
        raise InvalidParams(f"field `{name}` must be {expected}")
    return value


def parse_start(raw: Any) -> StartRequest:
    params = as_object(raw, "arena/start", required=("id",))
    job_id = field(params, "id", _is_str, "a string (a job id from the manifest)")
    return StartRequest(
        id=job_id,
        approved=field(params, "approved", _is_bool, "a boolean", False),
        resume=field(params, "resume", _is_resume, 'true, false or "auto"', "auto"),
        start_step=field(params, "startStep", _is_count, f"an integer from 0 to {MAX_INT}"),
        dry_run=field(params, "dryRun", _is_bool, "a boolean", False),
        probe=field(params, "probe", _is_bool, "a boolean", False),
    )


def parse_stop(raw: Any) -> StopRequest:
    params = as_object(raw, "arena/stop")
    return StopRequest(
        id=field(params, "id", _is_str, "a string (a job id)"),
        run_id=field(params, "runId", _is_str, "a string (a run id)"),
        kill=field(params, "kill", _is_bool, "a boolean", False),
        confirm=field(params, "confirm", _is_bool, "a boolean", False),
        grace_seconds=field(
            params, "graceSeconds", _is_seconds, f"a number of seconds from 0 to {MAX_SECONDS:.0f}"
        ),
        wait=field(params, "wait", _is_bool, "a boolean", True),
    )


def parse_status(raw: Any) -> None:
    as_object(raw, "arena/status")


def parse_logs(raw: Any) -> tuple[str | None, str | None, int]:
    params = as_object(raw, "arena/logs")
    run_id = field(params, "runId", _is_str, "a string (a run id)")
    cursor = field(params, "cursor", _is_cursor, "a cursor string from arena/logs")
    limit = field(params, "limit", _is_positive_int, f"an integer from 1 to {MAX_INT}", 1000)
    return run_id, cursor, min(limit, 10_000)


def parse_metrics(raw: Any) -> str | None:
    params = as_object(raw, "arena/metrics")
    run_id: str | None = field(params, "runId", _is_str, "a string (a run id)")
    return run_id


def command_argument(args: tuple[Any, ...], command: str) -> Any:
    """``workspace/executeCommand`` passes the params object as its one argument."""
    if not args:
        return None
    if len(args) > 1:
        raise InvalidParams(f"{command}: takes one argument, the params object")
    return args[0]
