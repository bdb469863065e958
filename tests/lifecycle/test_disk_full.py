"""A full disk, by fault injection (no root needed): the writer, the agent's state, the classifier."""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
from pathlib import Path

import pytest

from arena_ls.agent import statewriter
from arena_ls.agent.failure import classify
from arena_ls.agent.local import agent as agent_module
from arena_ls.agent.local.agent import LAUNCH_FAILED_EXIT, Agent
from arena_ls.run import outputlog
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.outputlog import ARENA, STDOUT, OutputWriter
from arena_ls.run.rundir import RunDir, RunSpec
from arena_ls.run.runlock import RunLock
from arena_ls.run.state_folder import StateFolder

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FullDisk:
    """Makes ``os.write`` in ``outputlog`` fail with ENOSPC while ``full`` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, partial: bool = False) -> None:
        self.full = False
        self.partial = partial
        real = os.write

        def write(fd: int, data: bytes | memoryview) -> int:
            if self.full:
                if self.partial and len(data) > 1:  # half of it lands, then the disk is full
                    real(fd, bytes(data[: len(data) // 2]))
                    self.partial = False
                raise ENOSPC
            return real(fd, data)

        monkeypatch.setattr(outputlog.os, "write", write)


@pytest.mark.parametrize("partial", [False, True])
def test_lines_that_cannot_be_written_are_counted_and_summarised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, partial: bool
) -> None:
    disk = FullDisk(monkeypatch, partial)
    writer = OutputWriter(tmp_path)
    writer.append(STDOUT, b"one\ntwo\n")
    disk.full = True
    writer.append(STDOUT, b"three\nfour\nfive\n")
    writer.append_line(ARENA, "an arena line")
    assert (writer.unwritten_lines, writer.write_failures) == (4, 2)
    disk.full = False
    writer.append(STDOUT, b"six\n")
    writer.close()
    texts = [line.text for line in iter_all_lines(tmp_path)]
    assert texts[:2] == ["one", "two"] and texts[3] == "six"
    assert texts[2].startswith("… 4 lines") and "No space left on device" in texts[2]
    assert [line.seq for line in iter_all_lines(tmp_path)] == [0, 1, 2, 3], "no hole, no half record"


def _agent(tmp_path: Path, argv: list[str]) -> Agent:
    def build(run_id: str) -> RunSpec:
        return RunSpec(run_id=run_id, job_id="job", job_name="Job", kind="task", argv=argv, cwd=str(tmp_path))

    run_dir = RunLock(StateFolder(tmp_path / "state")).claim("job", build)
    return Agent(RunDir(run_dir.path))


def test_a_failed_state_write_keeps_the_run_and_reports_disk_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _agent(tmp_path, [sys.executable, "-c", "pass"])
    real = statewriter.write_json_atomic
    full = {"on": True}
    failed = threading.Event()

    def write_json(path: Path, payload: object) -> None:
        if full["on"]:
            raise ENOSPC
        real(path, payload)

    report = agent.writer._on_failure
    assert report is not None

    def reported(error: Exception) -> None:
        report(error)
        failed.set()

    monkeypatch.setattr(statewriter, "write_json_atomic", write_json)
    monkeypatch.setattr(agent.writer, "_on_failure", reported)
    agent.state.step = 7
    agent.writer.request()  # never raises: the writer thread retries, the state stays in memory
    assert failed.wait(60)
    assert agent.writer.failing
    assert agent.state.failure is not None and agent.state.failure.kind == "disk-full"
    assert "No space left on device" in agent.state.failure.evidence
    full["on"] = False
    assert agent.writer.flush(60), "the retry writes the state once space is back"
    agent.trainer.printed.check_writes()  # every line and the state written: the disk-full evidence cleared
    assert agent.writer.close(60)
    written = json.loads(agent.run_dir.state_path.read_text())
    assert written["step"] == 7 and written["failure"] is None
    agent.output.close()
    texts = [line.text for line in iter_all_lines(agent.run_dir.path)]
    assert any("state.json could not be written" in t for t in texts)
    assert "writes succeed again: the disk has space" in texts


def test_an_agent_that_cannot_record_its_run_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _agent(tmp_path, [sys.executable, "-c", "import time; time.sleep(60)"])
    monkeypatch.setattr(RunDir, "write_state", lambda self, state: (_ for _ in ()).throw(ENOSPC))
    monkeypatch.setattr(agent_module, "FINAL_WRITE_TIMEOUT", 0.0)
    assert agent.run() == LAUNCH_FAILED_EXIT
    assert agent.trainer.stop.process is None, "no trainer was started"
    assert RunLock(agent.folder).holder() is None, "the lock is free again"


def test_a_trainer_that_dies_of_enospc_is_disk_full() -> None:
    tail = [
        "Traceback (most recent call last):",
        '  File "train.py", line 3, in <module>',
        "OSError: [Errno 28] No space left on device",
    ]
    failure = classify(exit_code=1, signal_name=None, tail=tail, nan_evidence=None)
    assert failure is not None and failure.kind == "disk-full"
    assert failure.evidence == "OSError: [Errno 28] No space left on device"


def test_a_stop_request_on_a_full_disk_is_an_empty_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from arena_ls.run import rundir

    def full(path: Path, payload: object) -> None:
        raise ENOSPC

    monkeypatch.setattr(rundir, "write_json_atomic", full)
    run_dir = RunDir(tmp_path)
    assert run_dir.read_stop_request() is None
    run_dir.request_stop(kill=False, grace_seconds=None, by="test")
    assert run_dir.stop_request_path.stat().st_size == 0
    assert run_dir.read_stop_request() == {}, "an empty stop.json still asks for a stop"


def _full_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reserve: bool
) -> tuple[statewriter.StateWriter, dict[str, int], RunDir]:
    """A state writer whose usual writes fail with ENOSPC until ``tries["left"]`` reaches 0."""
    from arena_ls.agent.reserve import StateReserve
    from arena_ls.run.rundir import Failure, RunState

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    real = statewriter.write_json_atomic
    tries = {"left": 40, "failed": 0}

    def write_json(path: Path, payload: object) -> None:
        if tries["left"] > 0:
            tries["left"] -= 1
            tries["failed"] += 1
            raise ENOSPC
        real(path, payload)

    monkeypatch.setattr(statewriter, "write_json_atomic", write_json)
    monkeypatch.setattr(statewriter, "RETRY_MOST_SECONDS", 0.01)
    state = RunState(run_id="r", job_id="job", failure=Failure("error", "x" * 200_000))
    store = StateReserve(run.path)
    if reserve:
        store.make()
    folder = StateFolder(tmp_path / "state")
    writer = statewriter.StateWriter(run, folder, state, threading.RLock(), lambda _: None, reserve=store)
    return writer, tries, run


def test_the_final_write_goes_into_the_reserve_when_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, tries, run = _full_writer(tmp_path, monkeypatch, reserve=True)
    assert writer.close_final(patience_without_folder=0.0)
    assert writer.reserve_used and tries["left"] > 0, "written at once, while the disk is still full"
    written = json.loads(run.state_path.read_text())
    assert written["runId"] == "r" and written["failure"]["kind"] == "error"
    assert len(run.state_path.read_bytes()) <= 64 * 1024, "the evidence was cut to fit the reserve"
    assert not (run.path / "state.reserve").exists()


def test_the_final_write_is_retried_until_it_succeeds_without_a_reserve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, tries, run = _full_writer(tmp_path, monkeypatch, reserve=False)
    assert writer.close_final(patience_without_folder=0.0)
    assert tries == {"left": 0, "failed": 40} and not writer.reserve_used
    assert json.loads(run.state_path.read_text())["runId"] == "r"
