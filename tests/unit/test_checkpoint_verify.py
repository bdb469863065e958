"""Checkpoint verification before a resume (contract 8.2, ``agent/ckptverify.py``), branch by branch.

``judge`` and ``candidates`` are pure; ``read_checkpoint`` is the agent's look, tested on real files
with an injected clock and sleep (no test waits for the quiet window)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from arena_ls.agent.ckptverify import (
    QUIET_SECONDS,
    DiskLook,
    Failed,
    Passed,
    Reading,
    candidates,
    judge,
    read_checkpoint,
    verify,
)
from arena_ls.agent.relaunch import CrashFacts, Stop, decide, needs_verification
from arena_ls.agent.watchdog import GiveUp, Relaunch, Watchdog, WatchdogRules
from arena_ls.run.rundir import CheckpointRecord
from arena_ls.run.state_folder import StateFolder
from arena_ls.run.trainer_announcements import Checkpoint, parse_arena_line

SHA = "a" * 64
OTHER = "b" * 64


def rec(step: int, path: str = "", at: float = 0.0, **kw: Any) -> CheckpointRecord:
    return CheckpointRecord(step=step, path=path or f"ckpt-{step}.pt", at=at, **kw)


QUIET = Reading(exists=True, size=10, mtime_ns=1)


# -- judge: one verdict per branch, in order ---------------------------------------------------


def test_a_checkpoint_without_a_path_cannot_be_verified() -> None:
    assert judge(CheckpointRecord(step=5, path="", at=0.0), None) == Failed(
        "announced without a path: nothing to verify"
    )


def test_a_missing_file_fails() -> None:
    assert judge(rec(5), Reading(exists=False)) == Failed("does not exist")


def test_an_unreadable_file_fails_saying_why() -> None:
    verdict = judge(rec(5), Reading(exists=False, error="Permission denied"))
    assert verdict == Failed("could not be read: Permission denied")


def test_a_look_a_stop_ended_is_not_a_pass() -> None:
    assert isinstance(judge(rec(5, sha256=SHA), Reading(exists=True, stopped=True)), Failed)


@pytest.mark.parametrize(("size", "mtime"), [(11, 1), (10, 2)])
def test_a_file_whose_size_or_time_changed_in_the_quiet_window_is_being_written(
    size: int, mtime: int
) -> None:
    reading = Reading(exists=True, size=10, mtime_ns=1, later_size=size, later_mtime_ns=mtime)
    verdict = judge(rec(5), reading)
    assert isinstance(verdict, Failed) and "being written" in verdict.why


def test_a_file_unchanged_over_the_window_is_not_being_written() -> None:
    reading = Reading(exists=True, size=10, mtime_ns=1, later_size=10, later_mtime_ns=1)
    assert judge(rec(5), reading) == Passed("exists")


def test_announced_bytes_that_differ_fail_before_any_hash() -> None:
    verdict = judge(rec(5, bytes=4096, sha256=SHA), QUIET)
    assert verdict == Failed("is 10 bytes, 4096 announced: torn or replaced")


def test_a_sha256_that_differs_fails_as_damaged() -> None:
    verdict = judge(rec(5, bytes=10, sha256=SHA), Reading(exists=True, size=10, mtime_ns=1, sha256=OTHER))
    assert isinstance(verdict, Failed) and "differs from the announced" in verdict.why


def test_the_strongest_check_passed_is_what_verified_says() -> None:
    hashed = Reading(exists=True, size=10, mtime_ns=1, sha256=SHA)
    assert judge(rec(5, bytes=10, sha256=SHA), hashed) == Passed("sha256")
    assert judge(rec(5, sha256=SHA), hashed) == Passed("sha256")
    assert judge(rec(5, bytes=10), QUIET) == Passed("bytes")
    assert judge(rec(5), QUIET) == Passed("exists")


def test_a_folder_checkpoint_is_verified_by_its_size_never_a_hash_it_cannot_have() -> None:
    folder = Reading(exists=True, size=10, mtime_ns=1, is_folder=True)
    assert judge(rec(5, bytes=10, sha256=SHA), folder) == Passed("bytes")
    assert judge(rec(5, sha256=SHA), folder) == Passed("exists")


# -- candidates: newest first, each once, its latest announcement ------------------------------


def test_candidates_are_newest_first_from_the_jobs_history_and_the_runs_announcements() -> None:
    ordered = candidates([rec(10, at=1), rec(20, at=2)], [rec(30, at=3), rec(25, path="b.pt", at=4)])
    assert [(r.step, r.path) for r in ordered] == [(30, "ckpt-30.pt"), (25, "b.pt"), (20, "ckpt-20.pt"),
                                                   (10, "ckpt-10.pt")]  # fmt: skip


def test_a_resave_at_the_same_step_and_path_replaces_the_older_announcement() -> None:
    ordered = candidates([rec(20, at=1, sha256=SHA)], [rec(20, at=5, sha256=OTHER)])
    assert len(ordered) == 1 and ordered[0].sha256 == OTHER


def test_a_file_overwritten_by_a_later_step_is_no_candidate_for_the_earlier_one() -> None:
    """One ``ckpt.pt`` announced at 100 and 200: it holds 200, whatever the bound."""
    one = [rec(100, path="ckpt.pt", at=1), rec(200, path="ckpt.pt", at=2), rec(150, at=1.5)]
    assert [(r.step, r.path) for r in candidates(one, [])] == [(200, "ckpt.pt"), (150, "ckpt-150.pt")]
    assert [r.step for r in candidates(one, [], at_most=180)] == [150], "never back to an overwritten file"


def test_a_bound_keeps_only_the_checkpoints_at_or_before_it() -> None:
    ordered = candidates([rec(100), rec(200), rec(300)], [], at_most=200)
    assert [r.step for r in ordered] == [200, 100]


# -- verify: newest passing one; older files never read -----------------------------------------


def test_verify_takes_the_newest_that_passes_and_reads_no_older_file() -> None:
    looked: list[int] = []

    def look(record: CheckpointRecord) -> Reading:
        looked.append(record.step)
        return Reading(exists=record.step != 30, size=10, mtime_ns=1)

    result = verify([rec(30), rec(20), rec(10)], look)
    assert result.chosen is not None and result.chosen.step == 20 and result.verified == "exists"
    assert looked == [30, 20], "the older one is never read"
    assert [(s.step, s.why) for s in result.skipped] == [(30, "does not exist")]
    resumed = result.resumed_from()
    assert resumed is not None and (resumed.step, resumed.verified, len(resumed.skipped)) == (20, "exists", 1)
    assert result.describe() == (
        "resuming from step 20 (ckpt-20.pt), verified by exists; skipped step 30 (ckpt-30.pt) does not exist"
    )


def test_a_look_a_stop_ended_interrupts_the_verification() -> None:
    result = verify([rec(30), rec(20)], lambda record: Reading(exists=True, stopped=True))
    assert result.interrupted and result.chosen is None and result.skipped == ()


def test_verify_with_none_passing_chooses_nothing_and_names_every_failure() -> None:
    result = verify([rec(30), rec(20)], lambda record: Reading(exists=False))
    assert result.chosen is None and result.resumed_from() is None
    assert "step 30 (ckpt-30.pt) does not exist; step 20 (ckpt-20.pt) does not exist" in result.evidence()
    assert "nothing overwritten" in result.evidence()


# -- the relaunch policy with a verification ------------------------------------------------------


def crash(**given: Any) -> CrashFacts:
    fields: dict[str, Any] = {"job_checkpoint": None, "run_checkpoint": 40, "run_start": None,
                              "launched_with_resume": False, "announced": True, "by_signal": True,
                              "last_line": None}  # fmt: skip
    fields.update(given)
    return CrashFacts(**fields)


def dog(max_restarts: int = 3) -> Watchdog:
    args = ["--resume", "{step}"]
    return Watchdog(WatchdogRules.for_job(kind="train", resume_args=args, max_restarts=max_restarts,
                                          backoff_seconds=0))  # fmt: skip


def test_a_relaunch_resumes_from_the_verified_checkpoint_not_the_last_announced() -> None:
    verification = verify([rec(40), rec(20)], lambda r: Reading(exists=r.step == 20, size=1, mtime_ns=1))
    decision = decide(crash(verification=verification), dog())
    assert isinstance(decision, Relaunch) and decision.start_step == 20


def test_none_verified_is_no_relaunch_but_resume_unknown_naming_what_failed() -> None:
    verification = verify(
        [rec(40, sha256=SHA)], lambda r: Reading(exists=True, size=1, mtime_ns=1, sha256=OTHER)
    )
    decision = decide(crash(verification=verification), dog())
    assert isinstance(decision, Stop) and decision.failure.kind == "resume-unknown"
    assert "step 40 (ckpt-40.pt) sha256" in decision.failure.evidence


def test_without_a_look_the_known_step_stands_as_before() -> None:
    decision = decide(crash(), dog())
    assert isinstance(decision, Relaunch) and decision.start_step == 40


def test_verification_is_asked_only_when_a_relaunch_could_follow() -> None:
    assert needs_verification(crash(), dog())
    assert not needs_verification(crash(run_checkpoint=None), dog()), "nothing known: the saved-file look"
    assert not needs_verification(crash(), dog(max_restarts=0)), "no relaunch: no file read"
    refused = crash(launched_with_resume=True, announced=False, by_signal=False)
    assert not needs_verification(refused, dog()), "a refusal is decided without a look"
    assert isinstance(decide(crash(verification=verify([], lambda r: None)), dog(max_restarts=0)), GiveUp)


# -- the agent's look on real files -----------------------------------------------------------------


class Clock:
    """A clock the look reads, and a sleep that advances it (and may act on the file meanwhile)."""

    def __init__(self, now: float, during_sleep: Any = None) -> None:
        self.now, self.slept, self.during_sleep = now, [] , during_sleep  # fmt: skip

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.during_sleep is not None:
            self.during_sleep()


def written(path: Path, data: bytes, age: float) -> float:
    """Write ``path``; its mtime ``age`` seconds before the returned 'now'."""
    path.write_bytes(data)
    mtime = path.stat().st_mtime
    return mtime + age


def test_an_old_quiet_file_is_read_once_and_hashed_only_when_a_hash_was_announced(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    data = b"x" * 3000
    clock = Clock(written(path, data, age=60.0))
    look = DiskLook(tmp_path, clock=clock, sleep=clock.sleep)
    plain = read_checkpoint(path, rec(5, bytes=3000), look)
    assert plain.sha256 is None and plain.later_size is None and clock.slept == []
    hashed = read_checkpoint(path, rec(5, sha256=hashlib.sha256(data).hexdigest()), look)
    assert hashed.sha256 == hashlib.sha256(data).hexdigest()
    assert judge(rec(5, sha256=hashed.sha256), hashed) == Passed("sha256")


def test_a_file_written_a_moment_ago_is_looked_at_again_after_the_quiet_window(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    clock = Clock(written(path, b"abc", age=0.25))
    reading = read_checkpoint(path, rec(5), DiskLook(tmp_path, clock=clock, sleep=clock.sleep))
    assert clock.slept == [pytest.approx(QUIET_SECONDS - 0.25)]
    assert reading.later_size == 3 and judge(rec(5), reading) == Passed("exists")


def test_a_file_still_growing_is_being_written_and_never_hashed(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"

    def grows() -> None:
        with open(path, "ab") as handle:
            handle.write(b"more")

    clock = Clock(written(path, b"abc", age=0.0), during_sleep=grows)
    reading = read_checkpoint(path, rec(5, sha256=SHA), DiskLook(tmp_path, clock=clock, sleep=clock.sleep))
    assert reading.sha256 is None
    verdict = judge(rec(5, sha256=SHA), reading)
    assert isinstance(verdict, Failed) and "being written" in verdict.why


def test_a_file_stamped_in_the_future_waits_the_whole_window(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    clock = Clock(written(path, b"abc", age=-30.0))
    read_checkpoint(path, rec(5), DiskLook(tmp_path, clock=clock, sleep=clock.sleep))
    assert clock.slept == [QUIET_SECONDS]


def test_a_stop_request_ends_a_long_hash(tmp_path: Path) -> None:
    path = tmp_path / "big.pt"
    clock = Clock(written(path, os.urandom(3 << 20), age=60.0))
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return True

    look = DiskLook(tmp_path, should_stop=stop, clock=clock, sleep=clock.sleep)
    reading = read_checkpoint(path, rec(5, sha256=SHA), look)
    assert reading.stopped and len(asked) == 1, "ended after its first chunk"


def test_a_torn_file_with_an_announced_size_is_never_hashed(tmp_path: Path) -> None:
    path = tmp_path / "ckpt.pt"
    clock = Clock(written(path, b"torn", age=60.0))
    asked: list[int] = []
    look = DiskLook(tmp_path, should_stop=lambda: bool(asked.append(1)), clock=clock, sleep=clock.sleep)
    reading = read_checkpoint(path, rec(5, bytes=4096, sha256=SHA), look)
    assert reading.sha256 is None and asked == []
    assert judge(rec(5, bytes=4096, sha256=SHA), reading) == Failed(
        "is 4 bytes, 4096 announced: torn or replaced"
    )


def test_a_folder_checkpoint_is_read_as_its_files_total(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-200"
    (folder / "sub").mkdir(parents=True)
    (folder / "model.bin").write_bytes(b"x" * 100)
    (folder / "sub" / "optim.bin").write_bytes(b"y" * 50)
    clock = Clock(folder.stat().st_mtime + 60.0)
    reading = DiskLook(tmp_path, clock=clock, sleep=clock.sleep)(rec(200, path="checkpoint-200", bytes=150))
    assert reading is not None and reading.is_folder and reading.size == 150
    assert judge(rec(200, path="checkpoint-200", bytes=150), reading) == Passed("bytes")


def test_a_relative_path_is_the_trainers_and_a_missing_one_does_not_exist(tmp_path: Path) -> None:
    clock = Clock(0.0)
    assert DiskLook(tmp_path, clock=clock, sleep=clock.sleep)(rec(5, path="nowhere/ckpt.pt")) == Reading(
        exists=False
    )


# -- the announcement and the job's record ----------------------------------------------------------


def test_an_announcement_carries_bytes_and_sha256_and_a_bad_one_is_an_ordinary_line() -> None:
    line = '@arena {"event": "checkpoint", "step": 4, "path": "c.pt", "bytes": 10, "sha256": "%s"}'
    assert parse_arena_line(line % SHA.upper()) == Checkpoint(4, "c.pt", 10, SHA)
    assert parse_arena_line('@arena {"event": "checkpoint", "step": 4, "path": "c.pt"}') == Checkpoint(
        4, "c.pt"
    )
    assert parse_arena_line(line % "nothex") is None
    for bad in ("-1", "1.5", "true", '"10"', "10000000000000000"):
        text = '@arena {"event": "checkpoint", "step": 4, "path": "c.pt", "bytes": ' + bad + "}"
        assert parse_arena_line(text) is None, bad


def test_the_jobs_record_keeps_its_last_n_announcements_and_a_fresh_start_clears_them(tmp_path: Path) -> None:
    folder = StateFolder(tmp_path)
    folder.ensure()
    for step in range(1, 6):
        folder.record_job_checkpoint("job", rec(step * 10, at=step, sha256=SHA, bytes=step), keep=3)
    history = folder.job_history("job")
    assert [(r.step, r.bytes, r.sha256) for r in history] == [(30, 3, SHA), (40, 4, SHA), (50, 5, SHA)]
    assert folder.job_checkpoint("job") == rec(50, at=5, sha256=SHA, bytes=5)
    folder.begin_job_anew("job", "r2")
    assert folder.job_history("job") == []
    folder.record_job_checkpoint("job", rec(7))
    assert [r.step for r in folder.job_history("job")] == [7], "the old lineage is never fallen back to"


def test_a_record_written_before_history_gives_its_last_checkpoint(tmp_path: Path) -> None:
    folder = StateFolder(tmp_path)
    folder.ensure()
    folder.job_record_path("job").write_text('{"step": 40, "path": "c.pt", "at": 1.0, "history": "junk"}')
    assert [(r.step, r.path) for r in folder.job_history("job")] == [(40, "c.pt")]
    folder.job_record_path("job").write_text(
        '{"step": 40, "path": "c.pt", "at": 1.0, "history": [{"step": "x"}, 3]}'
    )
    assert [(r.step, r.path) for r in folder.job_history("job")] == [(40, "c.pt")]
