"""What a real ``arena-ls`` over stdio does with clusters when no Ray head is needed to tell.

A stand-in dashboard (``tests/helpers/fake_dashboard.py``) or an address nothing
listens on plays the head: health with no cluster declared, ``runOn`` naming no
cluster (1006), a token file missing or empty (1005, naming the setting), a
bad ``clusters.NAME.python``, and the token never written anywhere.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import free_port
from tests.cluster.support import (
    CLUSTER,
    SIGNAL_STOP,
    TASK_CHECKS,
    TRAIN_CHECKS,
    cluster_job,
    cluster_workspace,
    refusal,
)
from tests.helpers.fake_dashboard import fake_dashboard
from tests.helpers.lsp import (
    ArenaClient,
    all_logs,
    job,
    make_workspace,
    poll_until,
    run_dir,
    start_server,
    stop_server,
    wait_for,
    wait_status,
)

INVALID_MANIFEST = 1006


def write_document(root: Path, document: dict[str, Any]) -> None:
    (root / "training" / "manifest.json").write_text(json.dumps(document, indent=2))


def cluster_names(status: dict[str, Any]) -> list[str]:
    return [entry["name"] for entry in status["health"]["clusters"]]


async def test_health_clusters_is_empty_when_the_manifest_declares_none(tmp_path: Path) -> None:
    """docs/protocol.md (Health): `clusters` is `[]` when the manifest declares no cluster; it
    follows the manifest on disk (a cluster declared, then no longer)."""
    root = make_workspace(tmp_path / "ws", [job("tiny", "--steps", "1")])
    client = await start_server(root, init_options={"clusters": {CLUSTER: {"address": "http://127.0.0.1:9"}}})
    try:
        status = await client.call("arena/status", {})
        assert status["health"]["clusters"] == [], "settings name a cluster, the manifest declares none"
        jobs = [job("tiny", "--steps", "1")]
        write_document(root, {"version": 1, "clusters": {}, "jobs": jobs})
        assert (await client.call("arena/status", {}))["health"]["clusters"] == []
        write_document(root, {"version": 1, "clusters": {CLUSTER: {"kind": "ray"}}, "jobs": jobs})
        assert cluster_names(await client.call("arena/status", {})) == [CLUSTER], "declared: one entry"
        write_document(root, {"version": 1, "jobs": jobs})
        assert (await client.call("arena/status", {}))["health"]["clusters"] == [], "no longer declared"
    finally:
        await stop_server(client)


async def test_run_on_naming_no_declared_cluster_is_refused_with_1006(tmp_path: Path) -> None:
    """docs/clusters.md: `runOn` naming no cluster is AR112 on the manifest and `arena/start`
    answers 1006 `invalid-manifest` with the diagnostics (contract 4.3), a dry run too; with
    `clusters` declared, and with none at all."""
    astray = cluster_job("astray", "--steps", "1") | {"runOn": "nowhere"}
    root = make_workspace(tmp_path / "ws", [astray])
    with_lab = {"version": 1, "clusters": {CLUSTER: {"kind": "ray"}}, "jobs": [astray]}
    client = await start_server(
        root, init_options={"clusters": {"nowhere": {"address": "http://127.0.0.1:9"}}}
    )
    try:
        for document in (with_lab, {"version": 1, "jobs": [astray]}):
            write_document(root, document)
            for params in ({"id": "astray"}, {"id": "astray", "dryRun": True}):
                error = await client.call_error("arena/start", params)
                assert error.code == INVALID_MANIFEST, (params, error)
                data: dict[str, Any] = error.data or {}
                assert data["reason"] == "invalid-manifest", data
                codes = [diag["code"] for diag in data["diagnostics"]]
                assert codes == ["AR112"], data
                assert "'nowhere'" in data["diagnostics"][0]["message"]
                assert "astray" in str(error), "the message names the job"
            status = await client.call("arena/status", {})
            assert status["runs"] == [], "nothing started"
            (info,) = status["jobs"]
            assert info["runnable"] is False and [d["code"] for d in info["blockedBy"]] == ["AR112"], info
    finally:
        await stop_server(client)


@pytest.mark.parametrize("problem", ["missing", "empty", "blank"])
async def test_a_token_file_missing_or_empty_is_refused_naming_the_setting(
    tmp_path: Path, problem: str
) -> None:
    """docs/clusters.md: a token file missing or empty is 1005, check `cluster`, naming
    `arena.clusters.NAME.tokenFile`. The head here would accept anything, even no token: the
    refusal must come from the file, and nothing is sent to the head."""
    token_file = tmp_path / "secrets" / "lab.token"
    if problem != "missing":
        token_file.parent.mkdir()
        token_file.write_text("" if problem == "empty" else " \n\t\n")
    root = cluster_workspace(
        tmp_path / "ws",
        [cluster_job("tiny", "--steps", "3"), cluster_job("trainer", "--steps", "3", kind="train")],
    )
    with fake_dashboard(token=None) as head:
        settings = {"clusters": {CLUSTER: {"address": head.address, "tokenFile": str(token_file)}}}
        for job_id, checks in (("tiny", TASK_CHECKS), ("trainer", TRAIN_CHECKS)):
            check = await refusal(root, settings, job_id, checks)
            message = check["message"]
            assert "arena.clusters.lab.tokenFile" in message, message
            why = "cannot read the token file" if problem == "missing" else "the token file"
            assert f"{why} of cluster 'lab'" in message, message
            assert (problem == "missing") != ("is empty" in message), message
            assert head.address.split("//")[1] not in message and str(token_file) not in message, message
        assert head.requests == [], "nothing was sent without the token"


async def test_a_cluster_python_that_is_an_empty_list_is_refused_and_keeps_the_default(
    tmp_path: Path,
) -> None:
    """docs/protocol.md (settings): `clusters.NAME.python` is a path or a non-empty list; `[]` keeps
    the default (`python`, the workers' own) and is shown once as a warning naming the key."""
    root = cluster_workspace(tmp_path / "ws", [cluster_job("tiny", "--steps", "3")])
    with fake_dashboard(token=None) as head:
        settings = {"clusters": {CLUSTER: {"address": head.address, "python": []}}}
        client = await start_server(root, init_options=settings)
        try:
            shown = await wait_for(
                lambda: [m for m in client.messages if "arena.clusters.lab.python" in m.message],
                what="the warning naming the key",
            )
            assert [m.message for m in shown] == [
                "arena.clusters.lab.python must be a path or a non-empty list of strings; using the default"
            ]
            assert shown[0].type == 2, "a warning"  # MessageType.Warning
            result = await client.call("arena/start", {"id": "tiny", "dryRun": True})
            assert result["argv"][0] == "python", result["argv"]
            assert [c["name"] for c in result["preflight"]] == list(TASK_CHECKS), result["preflight"]
        finally:
            await stop_server(client)


# -- the token is never written ---------------------------------------------------------------

SECRET = "tok-SECRET-7f3a9c1e5b2d4086"


async def _statuses_until(client: ArenaClient, names: set[str]) -> dict[str, dict[str, Any]]:
    """Ask ``arena/status`` until every cluster of ``names`` carries a sample."""
    shown: dict[str, dict[str, Any]] = {}

    async def sampled() -> bool:
        status = await client.call("arena/status", {})
        shown.update({entry["name"]: entry for entry in status["health"]["clusters"]})
        return all(shown.get(name, {}).get("at") for name in names)

    await poll_until(sampled, f"a sample of {sorted(names)}")
    return shown


@pytest.mark.skipif(sys.platform == "win32", reason="the server's stderr goes to a file through /bin/sh")
async def test_the_token_is_never_logged_shown_or_written(tmp_path: Path) -> None:
    """docs/clusters.md: the token is sent as `Authorization: Bearer`, never logged, never in an
    error message. The stand-in head takes the token for the pre-flight and the health sample,
    then answers every other request (the job's package) with a 500 page that quotes the request,
    token included; a second cluster answers everything so, a third is not there. The secret
    must appear nowhere: the server's stderr (debug level), the run folder (output.log,
    state.json, the agent's log), answers, errors, notifications."""
    token_file = tmp_path / "secrets" / "lab.token"
    token_file.parent.mkdir()
    token_file.write_text(SECRET + "\n")
    stderr = tmp_path / "server.stderr"
    root = cluster_workspace(tmp_path / "ws", [cluster_job("tiny", "--steps", "3", stop=SIGNAL_STOP)])
    document = json.loads((root / "training" / "manifest.json").read_text())
    document["clusters"].update({"echo": {"kind": "ray"}, "gone": {"kind": "ray"}})
    write_document(root, document)
    with fake_dashboard(token=SECRET) as head:
        own = {"tokenFile": str(token_file)}
        settings = {"clusters": {
            CLUSTER: {"address": head.address, **own},
            "echo": {"address": f"{head.address}/echo", **own},
            "gone": {"address": f"http://127.0.0.1:{free_port()}", **own},
        }}  # fmt: skip
        client = await start_server(
            root,
            init_options=settings,
            env={"ARENA_LS_LOG": "DEBUG"},
            command=["/bin/sh", "-c", 'exec "$0" -m arena_ls 2>"$1"', sys.executable, str(stderr)],
        )
        said: list[Any] = []
        try:
            health = await _statuses_until(client, {CLUSTER, "echo", "gone"})
            said.append(health)
            assert health[CLUSTER]["error"] is None and health[CLUSTER]["nodes"] == 1, health
            assert "answered 500" in health["echo"]["error"] and "<token>" in health["echo"]["error"], health
            assert "not reachable" in health["gone"]["error"], health

            info = await client.call("arena/start", {"id": "tiny"})
            said.append(info)
            final = await wait_status(client, info["runId"], "crashed")
            said.append(final)
            evidence = final["failure"]["evidence"]
            assert "the cluster did not accept the job" in evidence and "Bearer <token>" in evidence, (
                "the head's page was quoted, with the token blanked out"
            )
            said.append(await all_logs(client, info["runId"]))
            said.append(await client.call_error("arena/start", {"id": "nothing"}))
            said.append(await client.call("arena/status", {}))
        finally:
            await stop_server(client)
        authorizations = {request.authorization for request in head.requests}
        assert f"Bearer {SECRET}" in authorizations, "the token was sent (else this test proves nothing)"
        assert any(request.path.startswith("/echo/") for request in head.requests)
        assert any(request.path.startswith("/api/packages/") for request in head.requests)

    said += [client.statuses, client.log_batches, client.progress_reports]
    said += [m.message for m in client.messages] + [m.message for m in client.log_messages]
    for what in said:
        assert SECRET not in repr(what), what
    assert stderr.stat().st_size > 0, "the server's stderr was captured"
    assert SECRET not in stderr.read_text(encoding="utf-8", errors="replace")
    folder = run_dir(root, info["runId"])
    assert (folder / "output.log").exists() and (folder / "state.json").exists()
    written = [path for path in (root / ".aide").rglob("*") if path.is_file()]
    assert len(written) > 3
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
