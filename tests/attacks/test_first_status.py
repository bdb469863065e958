"""Issues 38 item 7 and 39 item 7: ``arena/status`` never waits for the gates.

On main a status waited up to three seconds for the lints it began (the first
status after start-up linted every trainer: 87-99 ms on a plain workspace, up
to 3 s with the hostile trainers of issue 39 open). Now it answers from what is
known: a trainer with no verdict yet is listed with ``gatesPending``, an AR000
"still checking" finding and ``runnable: false``; a start judges the trainer
itself and runs nothing before the verdict; the client is told (a code lens
refresh) when the verdicts are in. The gates' worker is stopped (SIGSTOP) to
know it is busy: behaviour only, never a time (the timings are in
``benchmarks/bench_first_status.py`` and docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from arena_ls.platform import SPARE_AGENT
from arena_ls.protocol import loopaudit
from tests.helpers.lsp import (
    ArenaClient,
    job,
    judged_status,
    make_workspace,
    spares_of,
    start_server,
    stop_server,
    wait_for,
)

pytestmark = pytest.mark.skipif(not hasattr(psutil.Process, "suspend"), reason="needs SIGSTOP")

UNGATED = b"# arena: ignore-file["
"""The fake trainer's first line, which keeps the gates off it."""
GATED = b"# arena: ignorX-file["
"""The same line spelt wrong: the gates apply again, and the trainer fails them."""


def _info(status: dict[str, Any], job_id: str) -> dict[str, Any]:
    return next(info for info in status["jobs"] if info["id"] == job_id)


def _gates_worker(client: ArenaClient) -> psutil.Process:
    for child in psutil.Process(client.server_process.pid).children():
        try:
            if "arena_ls.gates.worker" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    raise AssertionError("the server has no gates worker")


def _fail_the_gates(trainer: Path) -> None:
    text = trainer.read_bytes()
    assert text.startswith(UNGATED)
    trainer.write_bytes(GATED + text[len(UNGATED) :] + b"\n# rewritten\n")


async def test_a_status_answers_while_the_gates_are_busy_and_the_start_waits_for_the_verdict(
    tmp_path: Path,
) -> None:
    root = make_workspace(tmp_path / "ws", [job("t", "--steps", "50", kind="train")])
    client = await start_server(root)
    try:
        judged = _info(await judged_status(client), "t")
        assert judged["runnable"] is True and judged["gatesPending"] is False, judged
        worker = _gates_worker(client)  # it judged the trainer: it is there, and idle
        _fail_the_gates(root / "fake_trainer.py")
        refreshes = client.lens_refreshes
        worker.suspend()  # every lint from now on waits: the gates are known to be busy
        try:
            status = await client.call("arena/status", {})
            pending = _info(status, "t")
            assert pending["gatesPending"] is True and pending["runnable"] is False, pending
            [finding] = pending["blockedBy"]
            assert finding["code"] == "AR000" and "still checking" in finding["message"], finding
            start = asyncio.ensure_future(client.call_error("arena/start", {"id": "t"}))
            again = await client.call("arena/status", {})  # answered while the start waits
            assert again["runs"] == [] and again["active"] is None, again
            assert _info(again, "t")["gatesPending"] is True
        finally:
            worker.resume()
        error = await start
        assert (error.code, error.data["reason"]) == (1004, "gates-failed"), error
        assert (await client.call("arena/status", {}))["runs"] == [], "nothing ran before the verdict"
        await wait_for(lambda: client.lens_refreshes > refreshes, what="a code lens refresh for the verdict")
        verdict = _info(await judged_status(client), "t")
        assert verdict["runnable"] is False and verdict["blockedBy"], verdict
        assert all("still checking" not in d["message"] for d in verdict["blockedBy"]), verdict
    finally:
        await stop_server(client)


async def test_the_first_status_after_start_up_never_calls_an_unjudged_trainer_runnable(
    tmp_path: Path,
) -> None:
    """Whatever the first status finds (on a loaded machine the lint has seldom ended), a job is
    runnable only with a verdict; the verdict follows, and the client is told."""
    root = make_workspace(tmp_path / "ws", [job("t", "--steps", "5", kind="train"), job("task")])
    client = await start_server(root)
    try:
        first = await client.call("arena/status", {})
        trainer = _info(first, "t")
        if trainer["gatesPending"]:
            assert trainer["runnable"] is False and trainer["blockedBy"][0]["code"] == "AR000", trainer
        else:
            assert trainer["runnable"] is True and trainer["blockedBy"] == [], trainer
        task = _info(first, "task")
        assert task["gatesPending"] is False and task["runnable"] is True, task  # no gates for a task
        judged = _info(await judged_status(client), "t")
        assert judged["runnable"] is True and judged["blockedBy"] == [], judged
        if trainer["gatesPending"]:
            await wait_for(lambda: client.lens_refreshes >= 1, what="a code lens refresh for the verdict")
    finally:
        await stop_server(client)


LOOP_READS_BEFORE_THE_FIRST_STATUS = 12
"""Different files opened and folders listed on the event loop's thread from ``initialized`` to
the first status's answer, at most: the health sampler's first look (three), the runs folder and
its lock (read again by each of the follower's rounds, so counted once). The workspace below has
40 jobs, so one read per job on the loop would exceed it."""


def _audit(path: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """The loop's events (``protocol/loopaudit.py``) before and after the first status's answer."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    marks = [i for i, line in enumerate(lines) if line["event"] == loopaudit.FIRST_STATUS]
    assert len(marks) == 1, f"the first status is marked once: {lines}"
    return lines[: marks[0]], lines[marks[0] + 1 :]


async def test_the_event_loop_imports_nothing_starts_no_process_and_reads_few_files_for_the_first_status(
    tmp_path: Path,
) -> None:
    """Issue 38 item 7, by what the loop does rather than how long it takes: the workspace's
    modules are imported on the warm-up's thread, the spare agent and the gates' worker are
    started on threads of their own, and the job list is built off the loop (no file per job)."""
    jobs = [job(f"t{i}", "--steps", "5", kind="train") for i in range(20)]
    jobs += [job(f"task{i}") for i in range(20)]
    root = make_workspace(tmp_path / "ws", jobs)
    audit = tmp_path / "loop-audit.jsonl"
    client = await start_server(root, env={loopaudit.VARIABLE: str(audit)})
    try:
        first = await client.call("arena/status", {})
        assert [info["id"] for info in first["jobs"]] == [j["id"] for j in jobs]
        if SPARE_AGENT:  # the spare is started while the session runs: on its own thread
            await wait_for(lambda: spares_of(client), what="the spare agent")
        await judged_status(client)  # the gates' worker started and judged every trainer
    finally:
        await stop_server(client)
    before, after = _audit(audit)
    imported = [line["arg"] for line in before if line["event"] == "import"]
    assert imported == [], f"the event loop imported modules before the first status: {imported}"
    started = [line for line in before + after if line["event"] in PROCESS_STARTS]
    assert started == [], f"the event loop started processes: {started}"
    reads = {line["arg"] for line in before if line["event"] in FILE_READS}
    assert len(reads) <= LOOP_READS_BEFORE_THE_FIRST_STATUS, sorted(reads)


PROCESS_STARTS = {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.exec"}
FILE_READS = {"open", "os.listdir", "os.scandir"}
