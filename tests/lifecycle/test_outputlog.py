"""Pumps: a pipe copied into the run's output, its pieces handed to a listener attached late."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from arena_ls.agent import pumps
from arena_ls.agent.pumps import Pump
from arena_ls.run.capture import OutputReader
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.outputlog import ARENA, STDOUT, OutputWriter, Written
from tests.helpers.waiting import wait_until


def pump_over_pipe(tmp_path: Path) -> tuple[Pump, int, OutputWriter]:
    read_fd, write_fd = os.pipe()
    writer = OutputWriter(tmp_path)
    pump = Pump(os.fdopen(read_fd, "rb"), STDOUT, writer, pipe_bytes=0).start()
    return pump, write_fd, writer


def test_what_came_before_the_listener_is_handed_over_first_and_in_order(tmp_path: Path) -> None:
    pump, write_fd, writer = pump_over_pipe(tmp_path)
    os.write(write_fd, b"early 1\nearly 2\n")
    heard: list[bytes] = []
    arrived = threading.Event()

    def listener(written: Written) -> None:
        heard.append(written.complete)
        if b"late" in written.complete:
            arrived.set()

    # on disk before anyone listens
    wait_until(lambda: len(list(iter_all_lines(tmp_path))) >= 2, "the early lines in the log", pause=0.01)
    pump.attach(listener)
    os.write(write_fd, b"late\nno newline")
    assert arrived.wait(30)
    os.close(write_fd)
    pump.join(30)
    writer.close()
    assert b"".join(heard) == b"early 1\nearly 2\nlate\nno newline"
    assert [line.text for line in iter_all_lines(tmp_path)] == ["early 1", "early 2", "late", "no newline"]


def test_past_the_backlog_bound_the_pump_waits_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pumps, "BACKLOG_BYTES", 10)
    pump, write_fd, writer = pump_over_pipe(tmp_path)
    os.write(write_fd, "".join(f"line {i}\n" for i in range(2000)).encode())  # 18 KB: the pipe holds it
    # the pump wrote a first piece, over the bound
    wait_until(lambda: list(iter_all_lines(tmp_path)), "the pump's first write", pause=0.01)
    heard: list[bytes] = []
    pump.attach(lambda written: heard.append(written.complete))
    os.close(write_fd)
    pump.join(30)
    writer.close()
    expected = "".join(f"line {i}\n" for i in range(2000)).encode()
    assert b"".join(heard) == expected
    assert len(list(iter_all_lines(tmp_path))) == 2000


def test_a_supervisor_line_with_newlines_inside_is_that_many_lines_and_cursors_stay_valid(
    tmp_path: Path,
) -> None:
    """The cluster agent says a head's multi-line error page in one ``say``: the index must count
    the lines a reader splits, else the cursor after them is refused by ``arena/logs``."""
    writer = OutputWriter(tmp_path)
    writer.append_line(ARENA, "the cluster did not accept the job: 500\nGET /x\nHost: <address>\n")
    writer.append_line(ARENA, "after")
    reader = OutputReader(tmp_path)
    page = reader.read(reader.start(), 1000)
    assert [line.text for line in page.lines] == [
        "the cluster did not accept the job: 500", "GET /x", "Host: <address>", "after"
    ]  # fmt: skip
    assert [line.seq for line in page.lines] == [0, 1, 2, 3]
    reader.check_cursor(page.cursor)  # the next page's cursor is one the server accepts
    assert reader.read(page.cursor, 1000).lines == []
    writer.append_line(ARENA, "later")
    assert [line.text for line in reader.read(page.cursor, 1000).lines] == ["later"]
    writer.close()


class FailingOnce(OutputWriter):
    """A writer whose next ``append`` raises an error of its own (not a full disk's ``OSError``)."""

    fail_next = True

    def append(self, stream: int, data: bytes) -> Written:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the writer's bookkeeping broke")
        return super().append(stream, data)


def test_a_writer_that_raises_never_stops_the_pump_so_the_trainer_never_blocks(tmp_path: Path) -> None:
    """Issue 38's CI: a pump died of an error in the log's bookkeeping, the trainer blocked on its
    full pipe and was stopped as stalled. The pump logs the error and reads on: 4 MiB written
    after it (many pipes' worth) all reach the log, and the pump ends at the pipe's end."""
    read_fd, write_fd = os.pipe()
    writer = FailingOnce(tmp_path)
    pump = Pump(os.fdopen(read_fd, "rb"), STDOUT, writer, pipe_bytes=0).start()
    os.write(write_fd, b"lost to the broken bookkeeping\n")
    wait_until(lambda: not writer.fail_next, "the writer's failure")
    line = b"x" * 1023 + b"\n"

    def trainer() -> None:  # blocks for good on the full pipe if nothing drains it
        for _ in range(4096):
            os.write(write_fd, line)
        os.close(write_fd)

    writing = threading.Thread(target=trainer, daemon=True)
    writing.start()
    writing.join(timeout=60)
    assert not writing.is_alive(), "the trainer is blocked on its pipe: the pump stopped reading"
    pump.join(timeout=60)
    writer.close()
    texts = [entry.text for entry in iter_all_lines(tmp_path) if entry.stream == "stdout"]
    assert texts.count("x" * 1023) == 4096
