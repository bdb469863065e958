"""Issue 39 item 6: hostile trainers open in the editor do not block the server.

Fifteen trainers made to be hard to check (``tests/helpers/hostile_gates.py``:
200,000-deep nesting, a 3,000-helper chain, 50,000 lines, 2.6 MB, Latin-1,
NULs, 20,000 decorators...) are the scripts of fifteen jobs, all open in the
editor. On main ``arena/status`` waited for every lint (17 s) and the server
grew to 760 MB. The gates now run in a worker process within a time and memory
budget (``gates/budget.py``), and status never waits for them (issue 38 item 7,
``test_first_status.py``): it answers while they are being checked, with a
"still checking" finding for each trainer not checked yet. No timed assertion here: the status answer comes
before the last hostile file's diagnostics (the timings are in
``benchmarks/bench_hostile_gates.py`` and docs/performance.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from lsprotocol import types

from arena_ls import platform
from tests.helpers.hostile_gates import hostile_sources
from tests.helpers.lsp import ArenaClient, job, make_workspace, start_server, stop_server, wait_for


def _open(client: ArenaClient, path: Path, data: bytes) -> str:
    uri = path.as_uri()
    text = data.decode("utf-8", "replace")
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
        )
    )
    return uri


def _hostile_jobs(sources: dict[str, bytes]) -> list[dict[str, object]]:
    jobs: list[dict[str, object]] = []
    for name in sources:
        spec = job(name.removesuffix(".py"), kind="train")
        spec["script"] = name
        spec["args"] = [name]
        jobs.append(spec)
    return jobs


async def test_status_answers_while_hostile_trainers_are_checked_and_they_stay_gated(tmp_path: Path) -> None:
    sources = hostile_sources()
    root = make_workspace(tmp_path / "ws", [job("ok", kind="train"), *_hostile_jobs(sources)])
    for name, data in sources.items():
        (root / name).write_bytes(data)
    client = await start_server(root)
    try:
        uris = {name: _open(client, root / name, data) for name, data in sources.items()}
        status = await client.call("arena/status", {})
        published = [uri for uri in uris.values() if uri in client.diagnostics]
        assert len(published) < len(uris), "status waited for every hostile lint"
        jobs = {entry["id"]: entry for entry in status["jobs"]}
        for name in sources:
            entry = jobs[name.removesuffix(".py")]
            assert entry["runnable"] is False and entry["blockedBy"], entry
        checking = [
            name
            for name in sources
            if any("still checking" in d["message"] for d in jobs[name.removesuffix(".py")]["blockedBy"])
        ]
        assert checking, "status answered only once every hostile trainer was checked"
        await wait_for(
            lambda: all(uri in client.diagnostics for uri in uris.values()),
            timeout=300,
            what="every hostile file's diagnostics",
        )
        big = [d for d in client.diagnostics[uris["big.py"]] if d.code == "AR000"]
        assert len(big) == 1 and "could not check" in big[0].message, big
        status = await client.call("arena/status", {})
        jobs = {entry["id"]: entry for entry in status["jobs"]}
        assert jobs["ok"]["runnable"] is True, jobs["ok"]
        for name in sources:
            entry = jobs[name.removesuffix(".py")]
            assert entry["runnable"] is False, entry
            assert all("still checking" not in d["message"] for d in entry["blockedBy"]), entry
        error = await client.call_error("arena/start", {"id": "big"})
        assert error.code == 1004 and "could not check" in error.message, error
    finally:
        await stop_server(client)


async def test_a_trainer_past_the_budget_gets_one_finding_and_the_worker_recovers(tmp_path: Path) -> None:
    """The budget itself: a lint past the time allowed is stopped, the next lint gets a new worker."""
    from arena_ls.gates.budget import GateBudget

    budget = GateBudget(seconds=0.3)
    try:
        slow = hostile_sources()["many_calls.py"]
        findings = budget.lint(slow, None, ())
        assert [f.code for f in findings] == ["AR000"] and "took longer than" in findings[0].message
        assert [f.code for f in budget.lint("x = (\n", None, ())] == ["AR000"], "a new worker answers"
        budget.seconds = 30.0
        small = budget.lint("import torch\nfor step in range(3):\n    pass\n", None, ())
        assert "AR000" not in [f.code for f in small]
        tight = GateBudget(memory_mb=1)
        try:
            found = tight.lint(hostile_sources()["many_lines.py"], None, ())
            assert "needed more than 1 MB" in found[0].message, found
        finally:
            tight.close()
    finally:
        budget.close()


def test_the_gates_worker_opens_no_console_window_on_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    assert platform.helper_process_flags() == (platform.CREATE_NO_WINDOW if sys.platform == "win32" else 0)
    monkeypatch.setattr(sys, "platform", "win32")
    assert platform.helper_process_flags() == platform.CREATE_NO_WINDOW
