"""Windows output, simulated on Linux: CRLF line ends in awkward chunks, and the trainer's encoding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from arena_ls.agent.pumps import Pump
from arena_ls.agent.trainer_start import trainer_env
from arena_ls.run.capture_records import iter_all_lines
from arena_ls.run.outputlog import FLAG_CONTINUED, STDOUT, OutputWriter, Written
from tests.lifecycle.test_launch import FAKE_TRAINER, run_agent, write_run

CHECKPOINT_HEAD = b'@arena {"event": "checkpoint", "st'
CHECKPOINT_REST = b'ep": 2, "path": "ckpt-2.pt"}\r\n'


def lines_and_update(writer: OutputWriter, data: bytes) -> tuple[bytes, bytes]:
    """What one append finished and left as an update in place."""
    written = writer.append(STDOUT, data)
    return written.complete, written.update


def test_an_earlier_crlf_line_does_not_make_the_unfinished_one_an_update(tmp_path: Path) -> None:
    writer = OutputWriter(tmp_path)
    complete, _, update = writer.append(STDOUT, b"epoch 1\r\n" + CHECKPOINT_HEAD)
    assert (complete, update) == (b"epoch 1\r\n", b"")
    complete, _, update = writer.append(STDOUT, CHECKPOINT_REST)
    assert complete == CHECKPOINT_HEAD + CHECKPOINT_REST and update == b""
    writer.close()
    assert [line.text for line in iter_all_lines(tmp_path)] == [
        "epoch 1",
        '@arena {"event": "checkpoint", "step": 2, "path": "ckpt-2.pt"}',
    ]


def test_a_crlf_split_between_chunks_is_a_line_end_not_a_redraw(tmp_path: Path) -> None:
    writer = OutputWriter(tmp_path)
    assert lines_and_update(writer, b"saved\r") == (b"", b"")
    assert lines_and_update(writer, b"\nnext\r\n") == (b"saved\r\nnext\r\n", b"")
    writer.close()
    assert [line.text for line in iter_all_lines(tmp_path)] == ["saved", "next"]


def test_a_bare_carriage_return_is_still_an_update_in_place(tmp_path: Path) -> None:
    writer = OutputWriter(tmp_path)
    assert lines_and_update(writer, b"done\r\n 10%|#") == (b"done\r\n", b"")
    assert lines_and_update(writer, b"\r 20%|##") == (b"", b" 10%|#\r 20%|##")
    assert lines_and_update(writer, b"step 5\r") == (b"", b"")  # its \r may begin a \r\n: held
    assert lines_and_update(writer, b"step 6\r") == (b"", b"step 5\rstep 6\r")  # now a redraw
    writer.close()
    records = (tmp_path / "output.idx").read_bytes()
    assert records, "the updates were recorded"
    flags = [records[i + 1] for i in range(0, len(records), 30)]
    assert flags.count(FLAG_CONTINUED) == 2


def test_a_crlf_trainer_keeps_every_checkpoint_announcement(tmp_path: Path) -> None:
    """A real agent and trainer: chunks that end a CRLF line and begin the next (as on Windows)."""
    run_dir = write_run(tmp_path, [sys.executable, str(FAKE_TRAINER), "--steps", "0", "--crlf"])
    state = run_agent(run_dir)
    assert state["status"] == "succeeded"
    checkpoint = state["lastCheckpoint"]
    assert {key: checkpoint[key] for key in ("step", "path", "runId")} == {
        "step": 4,
        "path": "ckpt-4.pt",
        "runId": state["runId"],  # the run that announced it (the job's checkpoints across runs)
    }  # type: ignore[index]
    texts = [line.text for line in iter_all_lines(run_dir)]
    assert '@arena {"event": "checkpoint", "step": 2, "path": "ckpt-2.pt"}' in texts
    assert "saved" in texts and "checkpoint next" in texts


def test_a_failing_listener_never_stops_the_pump(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    writer = OutputWriter(tmp_path)
    pump = Pump(os.fdopen(read_fd, "rb"), STDOUT, writer, pipe_bytes=0).start()
    calls: list[bytes] = []
    second = threading.Event()

    def listener(written: Written) -> None:
        calls.append(written.complete)
        if len(calls) == 1:
            raise PermissionError(13, "The process cannot access the file")
        second.set()

    pump.attach(listener)
    os.write(write_fd, b"first\n")
    while not calls:
        pump.join(0.01)
    os.write(write_fd, b"second\n")
    assert second.wait(30), "the pump died with its listener's exception"
    os.close(write_fd)
    pump.join(30)
    writer.close()
    assert [line.text for line in iter_all_lines(tmp_path)] == ["first", "second"]


def test_the_trainer_gets_utf8_output_unless_the_job_chooses(tmp_path: Path) -> None:
    default = trainer_env({}, "run", "job", tmp_path / "STOP")
    assert default["PYTHONIOENCODING"] == "utf-8" and default["PYTHONUTF8"] == "1"
    chosen = trainer_env({"PYTHONIOENCODING": "cp1252"}, "run", "job", tmp_path / "STOP")
    assert chosen["PYTHONIOENCODING"] == "cp1252"
    assert chosen.get("PYTHONUTF8") == os.environ.get("PYTHONUTF8")


def test_a_trainer_printing_non_ascii_survives_a_non_utf8_inherited_encoding(tmp_path: Path) -> None:
    """As on Windows, where a pipe gets the ANSI code page: the agent's environment says ASCII."""
    run_dir = write_run(tmp_path, [sys.executable, str(FAKE_TRAINER), "--steps", "0", "--unicode"])
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    env.pop("PYTHONUTF8", None)
    subprocess.run(
        [sys.executable, "-m", "arena_ls.agent.launch", str(run_dir)], check=True, timeout=120, env=env
    )
    state = json.loads((run_dir / "state.json").read_text())
    texts = [line.text for line in iter_all_lines(run_dir)]
    assert state["status"] == "succeeded", texts
    assert "unicode \u2713 stdout=utf-8" in texts
