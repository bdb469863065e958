"""Params of the custom methods, checked field by field at the boundary.

pygls hands custom-method params over as plain JSON (see ``rpc/converter.py``);
here they become typed requests, and anything else becomes an
``InvalidParams`` whose message names the field.
"""

from __future__ import annotations

from typing import Any

from arena_ls.errors import InvalidParams
from arena_ls.lifecycle.starter import StartRequest
from arena_ls.lifecycle.stopper import StopRequest
from arena_ls.protocol.metrics_request import DEFAULT_LIMIT as DEFAULT_METRICS_LIMIT
from arena_ls.protocol.metrics_request import MAX_LIMIT as MAX_METRICS_LIMIT
from arena_ls.protocol.metrics_request import MetricsCursor
from arena_ls.validation import (
    BOOLEAN,
    STRING,
    Check,
    Invalid,
    choice,
    integer,
    json_kind,
    missing_fields,
    number,
    read_field,
    string,
)

MAX_INT = 2**31 - 1
"""LSP's ``integer``: counts and steps beyond it are refused, not carried around."""
MAX_SECONDS = 7 * 24 * 3600.0
MAX_CURSOR_CHARS = 4096
"""Our cursors are a few hundred characters; anything much longer is not one of ours."""

_FLAG = BOOLEAN.worded("a boolean")
_STEP = integer(0, MAX_INT)
_LIMIT = integer(1, MAX_INT)
_SECONDS = number(0, MAX_SECONDS, unit="seconds")
_CURSOR = string(min_length=1, max_length=MAX_CURSOR_CHARS).worded("a cursor string from arena/logs")
_RESUME = choice(True, False, "auto")
_JOB_ID = STRING.worded("a string (a job id from the manifest)")
_STOP_JOB_ID = STRING.worded("a string (a job id)")
_RUN_ID = STRING.worded("a string (a run id)")


def as_object(raw: Any, method: str, *, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The params object; None counts as ``{}`` unless a field is required.

    So does ``[]``: Neovim encodes an empty Lua table as an empty array.
    """
    if raw is None or raw == []:
        if required:
            raise InvalidParams(f"{method}: params must be an object with field `{required[0]}`")
        return {}
    if not isinstance(raw, dict):
        raise InvalidParams(f"{method}: params must be an object, not {json_kind(raw)}")
    missing = missing_fields(raw, required)
    if missing:
        raise InvalidParams(f"{method}: field `{missing[0]}` is required")
    return raw


def field(params: dict[str, Any], name: str, check: Check[Any], default: Any = None) -> Any:
    """One optional field; null means absent."""
    try:
        return read_field(params, name, check, default)
    except Invalid as error:
        raise InvalidParams(f"field {error.message}") from None


def parse_start(raw: Any) -> StartRequest:
    params = as_object(raw, "arena/start", required=("id",))
    job_id = field(params, "id", _JOB_ID)
    return StartRequest(
        id=job_id,
        approved=field(params, "approved", _FLAG, False),
        resume=field(params, "resume", _RESUME, "auto"),
        start_step=field(params, "startStep", _STEP),
        dry_run=field(params, "dryRun", _FLAG, False),
        probe=field(params, "probe", _FLAG, False),
        confirm=field(params, "confirm", _FLAG, False),
    )


def parse_stop(raw: Any) -> StopRequest:
    params = as_object(raw, "arena/stop")
    return StopRequest(
        id=field(params, "id", _STOP_JOB_ID),
        run_id=field(params, "runId", _RUN_ID),
        kill=field(params, "kill", _FLAG, False),
        confirm=field(params, "confirm", _FLAG, False),
        grace_seconds=field(params, "graceSeconds", _SECONDS),
        wait=field(params, "wait", _FLAG, True),
    )


DEFAULT_RUNS = 50
"""Runs ``arena/status`` lists, and ``arena/runs`` pages, unless asked otherwise (contract 7.2)."""
MAX_RUNS = 1000
"""The most runs one answer carries (each is read from its folder when no view follows it)."""
_RUNS_LIMIT = integer(0, MAX_RUNS)
_RUNS_PAGE = integer(1, MAX_RUNS)
_METRICS_LIMIT = integer(1, MAX_INT)
_RUNS_CURSOR = string(min_length=1, max_length=MAX_CURSOR_CHARS).worded(
    "a string (a run id, or the `next` of an arena/runs answer)"
)
_METRICS_CURSOR = string(min_length=1, max_length=MAX_CURSOR_CHARS).worded(
    "a cursor string from arena/metrics"
)


def parse_status(raw: Any) -> int:
    """``arena/status {runsLimit?}``: how many of the newest runs to list."""
    params = as_object(raw, "arena/status")
    limit: int = field(params, "runsLimit", _RUNS_LIMIT, DEFAULT_RUNS)
    return limit


def parse_runs(raw: Any) -> tuple[str | None, int]:
    """``arena/runs {before?, limit?}``."""
    params = as_object(raw, "arena/runs")
    before: str | None = field(params, "before", _RUNS_CURSOR)
    limit: int = field(params, "limit", _RUNS_PAGE, DEFAULT_RUNS)
    return before, limit


def parse_logs(raw: Any) -> tuple[str | None, str | None, int]:
    params = as_object(raw, "arena/logs")
    run_id = field(params, "runId", _RUN_ID)
    cursor = field(params, "cursor", _CURSOR)
    limit = field(params, "limit", _LIMIT, 1000)
    return run_id, cursor, min(limit, 10_000)


def parse_metrics(raw: Any) -> tuple[str | None, int, MetricsCursor | None]:
    """``arena/metrics {runId?, limit?, cursor?}``: a limit above ``MAX_LIMIT`` reads as it."""
    params = as_object(raw, "arena/metrics")
    run_id: str | None = field(params, "runId", _RUN_ID)
    limit: int = field(params, "limit", _METRICS_LIMIT, DEFAULT_METRICS_LIMIT)
    text: str | None = field(params, "cursor", _METRICS_CURSOR)
    try:
        cursor = MetricsCursor.decode(text) if text is not None else None
    except ValueError as error:
        raise InvalidParams(f"field `cursor`: {error}") from None
    return run_id, min(limit, MAX_METRICS_LIMIT), cursor


def parse_show_blocked(raw: Any) -> str:
    """``arena.showBlocked {id}``: the job id."""
    params = as_object(raw, "arena.showBlocked", required=("id",))
    job_id: str = field(params, "id", _JOB_ID)
    return job_id


def command_argument(args: tuple[Any, ...], command: str) -> Any:
    """``workspace/executeCommand`` passes the params object as its one argument."""
    if not args:
        return None
    if len(args) > 1:
        raise InvalidParams(f"{command}: takes one argument, the params object")
    return args[0]
