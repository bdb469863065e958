"""Exit codes, and every failure as one line a person can act on.

A script can rely on the exit status: 0 ok, 1 the run failed or was refused,
2 usage (bad arguments or params), 130 interrupted (the client was left with
Ctrl-C; any run goes on).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from arena_ls.client.asks import finished_question
from arena_ls.client.lspclient import JsonRpcError, ServerExited
from arena_ls.errors import REFUSALS
from arena_ls.wording import stop_words

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
INVALID_PARAMS = -32602
REFUSAL_CODES = frozenset(code for code, _ in REFUSALS)
"""Every refusal the server makes, 1013 ``cluster-unreachable`` included (``arena_ls.errors``)."""

HINTS = {
    "approval-required": "pass --approve",
    "probe-required": "run `arena start JOB --probe` first",
    "already-running": "see it with `arena status`, stop it with `arena stop`",
    "gates-failed": "see `arena check`",
    "invalid-manifest": "see `arena check`",
}


class CliError(Exception):
    """A failure the client reports as one line ``arena: ...`` and an exit status."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def from_rpc_error(error: JsonRpcError) -> CliError:
    """A JSON-RPC error as a one-line ``CliError``."""
    if error.code in REFUSAL_CODES:
        reason = error.reason or str(error.code)
        return CliError(f"refused ({reason}): {refusal_detail(reason, error)}")
    if error.code == INVALID_PARAMS:
        return CliError(f"bad request: {one_line(error.message)}", EXIT_USAGE)
    return CliError(f"server error {error.code}: {one_line(error.message)}")


def from_server_exit(error: ServerExited) -> CliError:
    return CliError(
        f"the language server exited unexpectedly (code {error.returncode}); "
        "run with --verbose to see its log"
    )


def refusal_detail(reason: str, error: JsonRpcError) -> str:
    data: dict[str, Any] = error.data if isinstance(error.data, dict) else {}
    if reason == "no-checkpoint":
        return no_checkpoint_detail(data)
    if reason == "invalid-manifest":
        return manifest_refusal(error.message, data.get("diagnostics"))
    if reason == "already-finished" and isinstance(data.get("run"), dict):
        run = data["run"]
        now = _dt.datetime.now(tz=_dt.timezone.utc)
        return finished_question(str(run.get("jobId") or "JOB"), run, now).refusal()
    parts = [cli_words(reason, error.message)]
    extra = _extra(reason, data)
    if extra:
        parts.append(extra)
    if reason in HINTS:
        parts.append(HINTS[reason])
    return "; ".join(parts)


def cli_words(reason: str, message: str) -> str:
    """The server's message without its protocol instructions (``start it with approved:
    true``): the hint that follows says what to type instead."""
    text = one_line(message)
    if reason == "approval-required":
        return text.split(":", 1)[0]
    return text


def no_checkpoint_detail(data: dict[str, Any]) -> str:
    now = _dt.datetime.now(tz=_dt.timezone.utc)
    return f"{stop_words(data, now)}; pass --confirm to stop anyway"


def _extra(reason: str, data: dict[str, Any]) -> str:
    if reason == "not-allowlisted":
        known = data.get("known") or []
        return f"known jobs: {', '.join(map(str, known)) or 'none'}"
    if reason == "gates-failed":
        codes = sorted({str(d.get("code")) for d in data.get("diagnostics") or [] if isinstance(d, dict)})
        return f"codes: {', '.join(codes)}" if codes else ""
    return ""


MISSING_MANIFEST = "there is no manifest"
"""How the loader's AR101 begins for a manifest file that is not there (not a JSON error)."""


def manifest_refusal(message: str, diagnostics: Any) -> str:
    """``1006``: a missing manifest says so; a broken one names its first error and where."""
    errors = [d for d in diagnostics or [] if isinstance(d, dict) and d.get("severity") in (None, "error")]
    first = errors[0] if errors else {}
    if str(first.get("message", "")).startswith(MISSING_MANIFEST):
        return f'{one_line(first["message"])[:300]}; create it (README: "Add your own job")'
    words = manifest_error_words(errors)
    return f"{one_line(message)}{': ' + words if words else ''}; see `arena check`"


def manifest_error_words(errors: list[dict[str, Any]]) -> str:
    """The manifest's first error, where it is: ``AR101 line 3, column 5: not valid JSON: ...``."""
    if not errors:
        return ""
    first = errors[0]
    start = first.get("range", {}).get("start", {}) if isinstance(first.get("range"), dict) else {}
    line, column = start.get("line"), start.get("character")
    where = ""
    if isinstance(line, int) and isinstance(column, int) and (line, column) != (0, 0):
        where = f" line {line + 1}, column {column + 1}:"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{first.get('code')}{where} {one_line(str(first.get('message')))[:200]}{more}"


def one_line(text: str) -> str:
    return " ".join(str(text).split())
