"""A small client of Ray's Jobs REST API (the dashboard's ``/api/jobs/``), standard library only.

Ray's own SDK reads its token once per process (``RAY_AUTH_TOKEN``), so two
clusters with two tokens cannot be used from one process with it; here the
token is an explicit ``Authorization: Bearer`` header of each request. Error
messages never carry the address or the token: they name the cluster.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import urllib.error

DEFAULT_TIMEOUT = 10.0
SUBMIT_TIMEOUT = 60.0
"""A submission can take Ray a while on a busy head (it starts the job's supervisor first)."""


class ClusterError(Exception):
    """A request to the cluster failed; ``kind`` says how, the message is safe to show.

    Kinds: ``unreachable`` (no answer), ``unauthenticated`` (401/403),
    ``not-found`` (404), ``refused`` (another 4xx/5xx), ``bad-answer`` (not the
    JSON Ray answers with).
    """

    def __init__(self, kind: str, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


def normalise_address(address: str) -> str:
    """``http://host:8265`` with no trailing slash (a bare ``host:port`` gets ``http://``)."""
    address = address.strip().rstrip("/")
    if "://" not in address:
        address = f"http://{address}"
    return address


class JobsClient:
    """Requests to one cluster; ``name`` is what error messages call it."""

    def __init__(self, name: str, address: str, token: str | None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.name = name
        self.base = normalise_address(address)
        self._token = token
        self.timeout = timeout

    def __repr__(self) -> str:  # never the token
        return f"JobsClient({self.name!r})"

    # -- transport ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> bytes:
        """The answer's body; ``ClusterError`` for anything but a 2xx answer."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        # Loaded at a cluster's first request: http.client and ssl cost every server 30 ms at start.
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.base + path, data=body, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                data: bytes = answer.read()
                return data
        except urllib.error.HTTPError as error:
            raise self._http_error(error, path) from None
        except (urllib.error.URLError, OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            text = getattr(reason, "strerror", None) or type(reason).__name__
            message = f"cluster {self.name!r} is not reachable ({text})"
            raise ClusterError("unreachable", message) from None

    def _http_error(self, error: urllib.error.HTTPError, path: str) -> ClusterError:
        code = error.code
        if code in (401, 403):
            why = "no token was sent" if not self._token else "the token was refused"
            return ClusterError(
                "unauthenticated", f"cluster {self.name!r} refused the request ({code}: {why})", code
            )
        try:
            detail = self._redact(error.read().decode("utf-8", "replace")).strip()[:300]
        except OSError:
            detail = ""
        kind = "not-found" if code == 404 else "refused"
        what = path.split("?")[0]
        return ClusterError(kind, f"cluster {self.name!r} answered {code} to {what}: {detail}", code)

    def _redact(self, text: str) -> str:
        """``text`` (an answer's body) without the token or the address: a proxy or a debugging
        server may echo the request, ``Authorization`` header included, into its error page."""
        host = urllib.parse.urlsplit(self.base).netloc
        for secret, shown in ((self._token, "<token>"), (self.base, "<address>"), (host, "<address>")):
            if secret:
                text = text.replace(secret, shown)
        return text

    def json(self, method: str, path: str, payload: Any = None, timeout: float | None = None) -> Any:
        body = json.dumps(payload).encode() if payload is not None else None
        data = self.request(method, path, body, timeout=timeout)
        try:
            return json.loads(data) if data else None
        except ValueError:
            raise ClusterError("bad-answer", f"cluster {self.name!r} answered {path} with no JSON") from None

    # -- the Jobs API ------------------------------------------------------------------------

    def list_jobs(self, timeout: float | None = None) -> list[Any]:
        """Every job (an authenticated request: the pre-flight's check of the token)."""
        answer = self.json("GET", "/api/jobs/", timeout=timeout)
        return answer if isinstance(answer, list) else []

    def submit(self, payload: dict[str, Any]) -> str:
        answer = self.json("POST", "/api/jobs/", payload, timeout=SUBMIT_TIMEOUT)
        if not isinstance(answer, dict) or not isinstance(answer.get("submission_id"), str):
            raise ClusterError("bad-answer", f"cluster {self.name!r} did not say which job it submitted")
        return str(answer["submission_id"])

    def info(self, submission_id: str) -> dict[str, Any]:
        answer = self.json("GET", f"/api/jobs/{_quote(submission_id)}")
        if not isinstance(answer, dict):
            raise ClusterError("bad-answer", f"cluster {self.name!r} sent no job details")
        return answer

    def logs(self, submission_id: str) -> str:
        """The job's whole log so far (the entrypoint's stdout and stderr together)."""
        answer = self.json("GET", f"/api/jobs/{_quote(submission_id)}/logs")
        logs = answer.get("logs") if isinstance(answer, dict) else None
        return logs if isinstance(logs, str) else ""

    def stop(self, submission_id: str) -> bool:
        answer = self.json("POST", f"/api/jobs/{_quote(submission_id)}/stop")
        return bool(answer.get("stopped")) if isinstance(answer, dict) else False

    # -- packages (working_dir) --------------------------------------------------------------

    def package_exists(self, uri: str) -> bool:
        try:
            self.request("GET", f"/api/packages/{_package_path(uri)}")
        except ClusterError as error:
            if error.kind == "not-found":
                return False
            raise
        return True

    def upload_package(self, uri: str, data: bytes) -> None:
        self.request("PUT", f"/api/packages/{_package_path(uri)}", data, "application/octet-stream", 120.0)

    # -- the cluster -------------------------------------------------------------------------

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's alive nodes as ``{"resources": {...}, "address": ...}``."""
        answer = self.json("GET", "/nodes?view=summary")
        summary = answer.get("data", {}).get("summary") if isinstance(answer, dict) else None
        nodes: list[dict[str, Any]] = []
        for entry in summary if isinstance(summary, list) else []:
            raylet = entry.get("raylet") if isinstance(entry, dict) else None
            if not isinstance(raylet, dict) or raylet.get("state", "ALIVE") != "ALIVE":
                continue
            resources = raylet.get("resourcesTotal")
            nodes.append({"resources": resources if isinstance(resources, dict) else {}})
        return nodes


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _package_path(uri: str) -> str:
    """``gcs://_ray_pkg_x.zip`` → ``gcs/_ray_pkg_x.zip`` (the packages route)."""
    protocol, _, name = uri.partition("://")
    return f"{_quote(protocol)}/{_quote(name)}"


@attrs.frozen
class NotSent:
    """Why a submission was not accepted; ``definite``: Ray surely lacks it (it refused it, or
    nothing was sent), else it may have it (no clear answer came)."""

    evidence: str
    definite: bool


def transient(error: ClusterError) -> bool:
    """No answer about the job at all (unreachable, or the head's own 5xx trouble): waited out."""
    return error.kind == "unreachable" or (error.status is not None and error.status >= 500)
