"""One parsed manifest per content, one lint per trainer content (issue 24, item 1).

The cache is a layer around ``load_manifest``: these tests count what it
parses and lints, and check that what a load depends on besides the text (a
script that appears, a trainer that changes) is still seen.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from arena_ls.gates.cache import TrainerGates
from arena_ls.manifest import ManifestResult
from arena_ls.manifest.cache import ManifestCache

REPO = Path(__file__).resolve().parents[2]
TRAINER = (REPO / "tests" / "fixtures" / "trainers" / "fake_trainer.py").read_text()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def train_job(job_id: str, script: str = "train.py", **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "train",
        "command": "{python}",
        "args": [script],
        "script": script,
        "resume": {"args": ["--resume", "{step}"]},
        "status": "ready",
        **extra,
    }


def write(root: Path, jobs: list[dict[str, Any]], *, indent: int = 2) -> Path:
    path = root / "manifest.json"
    path.write_text(json.dumps({"version": 1, "jobs": jobs}, indent=indent))
    return path


def codes(result: ManifestResult) -> list[str]:
    return sorted(d.code for d in result.diagnostics)


def test_the_manifest_is_parsed_once_per_content(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAINER)
    path = write(tmp_path, [train_job("a"), train_job("b")])
    cache = ManifestCache()
    first = cache.get(path, tmp_path, None)
    assert cache.get(path, tmp_path, None) is first
    os.utime(path, ns=(1, 1))  # same bytes, another signature: read and hashed again, not parsed
    assert cache.get(path, tmp_path, None) is first
    assert cache.loads == 1
    write(tmp_path, [train_job("a")])
    second = cache.get(path, tmp_path, None)
    assert list(second.jobs) == ["a"] and cache.loads == 2


def test_a_buffer_with_the_files_text_shares_its_parse(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAINER)
    path = write(tmp_path, [train_job("a")])
    cache = ManifestCache()
    on_disk = cache.get(path, tmp_path, None)
    assert cache.get_text(path.read_text(), path, tmp_path, None) is on_disk
    edited = cache.get_text(path.read_text().replace('"a"', '"b"'), path, tmp_path, None)
    assert list(edited.jobs) == ["b"] and cache.loads == 2


def test_a_script_created_after_the_parse_is_seen_once_revalidated(tmp_path: Path) -> None:
    path = write(tmp_path, [train_job("a")])
    clock = Clock()
    cache = ManifestCache(clock)
    assert "AR107" in codes(cache.get(path, tmp_path, None))
    (tmp_path / "train.py").write_text(TRAINER)
    assert "AR107" in codes(cache.get(path, tmp_path, None)), "the synchronous read never waits"

    async def asked() -> tuple[ManifestResult, ManifestResult]:
        clock.now += 60.0  # due: the next reader is answered at once, a fresh load runs behind it
        stale = await cache.get_async(path, tmp_path, None)
        fresh = await cache.get_async(path, tmp_path, None, max_age=0.0)
        return stale, fresh

    stale, fresh = asyncio.run(asked())
    assert "AR107" in codes(stale)
    assert "AR107" not in codes(fresh) and "a" in fresh.jobs


def test_invalidate_makes_the_next_revalidating_read_load_again(tmp_path: Path) -> None:
    path = write(tmp_path, [train_job("a")])
    cache = ManifestCache()
    assert "AR107" in codes(cache.get(path, tmp_path, None))
    (tmp_path / "train.py").write_text(TRAINER)
    assert "AR107" in codes(cache.get(path, tmp_path, None, revalidate=True)), "not due yet"
    cache.invalidate()
    assert "AR107" not in codes(cache.get(path, tmp_path, None, revalidate=True))


def test_an_unreadable_manifest_is_ar101_and_not_cached(tmp_path: Path) -> None:
    cache = ManifestCache()
    missing = cache.get(tmp_path / "nothing.json", tmp_path, None)
    assert missing.fatal and codes(missing) == ["AR101"]
    path = write(tmp_path, [])
    os.replace(path, tmp_path / "nothing.json")
    assert not cache.get(tmp_path / "nothing.json", tmp_path, None).fatal


def gates_for(root: Path, path: Path, cache: ManifestCache) -> tuple[TrainerGates, list[int]]:
    asked = [0]

    def manifest() -> ManifestResult:
        asked[0] += 1
        return cache.get(path, root, None)

    return TrainerGates(root, manifest, lambda: True), asked


def test_jobs_sharing_a_trainer_lint_it_once_and_never_reload_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("import torch\nfor step in range(10):\n    pass\n")
    jobs = [train_job(f"j{i}", checkpoint={"pattern": r"saved (?P<step>\d+)"}) for i in range(200)]
    path = write(tmp_path, jobs)
    cache = ManifestCache()
    gates, _ = gates_for(tmp_path, path, cache)
    manifest = cache.get(path, tmp_path, None)
    assert gates.missing(manifest) == [manifest.jobs["j0"]]
    errors = [gates.errors(job) for job in manifest.jobs.values()]
    assert all(e == errors[0] for e in errors) and errors[0], "the trainer fails its gates"
    assert gates.lints == 1 and cache.loads == 1
    assert gates.missing(manifest) == []


def test_a_changed_trainer_is_linted_again_and_an_unchanged_one_is_not(tmp_path: Path) -> None:
    trainer = tmp_path / "train.py"
    trainer.write_text(TRAINER)
    path = write(tmp_path, [train_job("a")])
    cache = ManifestCache()
    gates, _ = gates_for(tmp_path, path, cache)
    job = cache.get(path, tmp_path, None).jobs["a"]
    passing = gates.errors(job)
    trainer.write_text("print('no loop')\n")
    failing = gates.errors(job)
    assert failing and failing != passing and gates.lints == 2
    trainer.write_text(TRAINER)  # back to the first content: its lint is kept
    assert gates.errors(job) == passing and gates.lints == 2


def test_a_buffer_and_the_file_with_one_text_share_one_lint(tmp_path: Path) -> None:
    trainer = tmp_path / "train.py"
    trainer.write_text(TRAINER)
    path = write(tmp_path, [train_job("a")])
    cache = ManifestCache()
    gates, _ = gates_for(tmp_path, path, cache)
    from_file = gates.lint_file(str(trainer))
    assert gates.lint_file(str(trainer), TRAINER) == from_file and gates.lints == 1
    gates.lint_file(str(trainer), TRAINER + "\n# edited\n")
    assert gates.lints == 2


@pytest.mark.parametrize("patterns", [None, r"saved (?P<step>\d+)"])
def test_a_jobs_checkpoint_pattern_reaches_its_trainers_lint(tmp_path: Path, patterns: str | None) -> None:
    (tmp_path / "train.py").write_text(TRAINER)
    extra = {"checkpoint": {"pattern": patterns}} if patterns else {}
    path = write(tmp_path, [train_job("a", **extra)])
    cache = ManifestCache()
    gates, asked = gates_for(tmp_path, path, cache)
    expected = (patterns,) if patterns else ()
    assert gates.checkpoint_patterns(str(tmp_path / "train.py")) == expected
    gates.checkpoint_patterns(str(tmp_path / "train.py"))
    assert cache.loads == 1 and asked[0] == 2, "one cached manifest per question, parsed once"
