"""The first ``arena/status`` after start-up (issues 38 item 7 and 39 item 7): it never waits for the gates.

- ``plain``: a 2-job workspace (one ``train`` job of the bundled trainer); a
  fresh server, ``initialized``, then one status, timed alone.
- ``hostile``: the fifteen trainers of ``tests/helpers/hostile_gates.py``
  opened in the editor, then a status at once (the gates' worker is busy
  with them for half a minute); its round trip.
- ``manifest_500``: a 500-job manifest (250 ``train`` + 250 ``task``) opened
  in the editor, its diagnostics pass under way, then a status; its round trip.

Each status's answer must list every job, and a trainer not judged yet must
be listed as not runnable (the gates' "still checking" finding): a status that
answered "runnable" before the verdict would be a wrong fast answer.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from lsprotocol import types

from benchmarks import arena, harness
from benchmarks.bench_hostile_gates import _jobs as hostile_jobs
from benchmarks.bench_scale import generated_jobs, prepare
from benchmarks.client import BenchClient
from benchmarks.harness import Section
from tests.helpers.hostile_gates import hostile_sources


def run(quick: bool = False, repeats: int | None = None) -> list[Section]:
    repeats = repeats or (1 if quick else 3)
    section = Section("first_status", "the first arena/status after start-up, timed alone")
    for _ in range(repeats):
        section.figure("plain_ms", "ms", "<= 20").add(asyncio.run(_plain()))
        section.figure("hostile_ms", "ms", "<= 100").add(asyncio.run(_hostile()))
        if not quick:
            section.figure("manifest_500_ms", "ms", "<= 1000").add(asyncio.run(_manifest_500()))
    section.facts["load_average"] = harness.machine()["load_average"]
    return [section]


async def _timed_status(client: BenchClient, jobs: int) -> float:
    sent = time.perf_counter()
    answer = await client.call("arena/status", {})
    elapsed = (time.perf_counter() - sent) * 1000.0
    if len(answer["jobs"]) != jobs:
        raise RuntimeError(f"arena/status listed {len(answer['jobs'])} jobs of {jobs}")
    _check_no_false_pass(answer)
    return elapsed


def _check_no_false_pass(answer: dict[str, Any]) -> None:
    """A job whose trainer is not judged yet is never runnable (its finding is "still checking")."""
    for job in answer["jobs"]:
        checking = any("still checking" in d["message"] for d in job["blockedBy"])
        if checking and job["runnable"]:
            raise RuntimeError(f"job {job['id']} is runnable while the gates still check it")


async def _plain() -> float:
    jobs = generated_jobs(1, 1)
    with harness.workspace(jobs) as root:
        prepare(root)
        async with arena.session(root) as client:
            return await _timed_status(client, len(jobs))


async def _hostile() -> float:
    sources = hostile_sources()
    jobs = hostile_jobs(list(sources))
    with harness.workspace(jobs) as root:
        for name, data in sources.items():
            (root / name).write_bytes(data)
        async with arena.session(root) as client:
            for name, data in sources.items():
                _open(client, root / name, data.decode("utf-8", "replace"))
            return await _timed_status(client, len(jobs))


async def _manifest_500() -> float:
    jobs = generated_jobs(250, 250)
    with harness.workspace(jobs) as root:
        prepare(root)
        manifest = root / "training" / "manifest.json"
        async with arena.session(root) as client:
            _open(client, manifest, manifest.read_text(), language="json")
            await _diagnostics_begun(client)
            return await _timed_status(client, len(jobs))


async def _diagnostics_begun(client: BenchClient) -> None:
    """Let the server begin the manifest's diagnostics pass (it is scheduled on the open, and runs
    for a second and more with 500 jobs): a benchmark may wait a little; a test never does."""
    await asyncio.sleep(0.05)


def _open(client: BenchClient, path: Path, text: str, language: str = "python") -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=path.as_uri(), language_id=language, version=1, text=text
            )
        )
    )


if __name__ == "__main__":  # a quick look: python -m benchmarks.bench_first_status
    for result in run(quick=True):
        print(json.dumps({k: v.samples for k, v in result.figures.items()}))
