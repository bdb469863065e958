"""Names are data (issue 24 item 7): ``arena`` shows the escape sequences and bidi overrides a
manifest or a trainer puts in its text, never sends them to the terminal.

The raw bytes ``arena status`` writes are checked, on a pipe and on a real terminal (a pty).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from arena_ls.client.render import plain_line, styled_line, write_line
from arena_ls.client.visible_controls import visible
from tests.client.support import ARENA, WAIT, arena_env
from tests.helpers.lsp import job, make_workspace

EVIL_NAME = "clear\x1b[2J title\x1b]0;pwned\x07 rlo\u202egpj.exe bell\x07 [red]markup[/red] nl\nend"
RAW = [b"\x1b[2J", b"\x1b]0;pwned", "\u202e".encode(), b"\x07", b"nl\nend"]
SHOWN = ["clear^[[2J", "title^[]0;pwned^G", "rlo<U+202E>gpj.exe", "bell^G", "[red]markup[/red]", "nl^Jend"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return make_workspace(tmp_path / "ws", [job("evil", "--steps", "2", name=EVIL_NAME)])


def _status_on_a_pipe(root: Path) -> bytes:
    done = subprocess.run(
        [*ARENA, "status", "--root", str(root)],
        capture_output=True,
        env=arena_env(),
        cwd=root,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status_on_a_terminal(root: Path) -> bytes:
    import pty

    leader, follower = pty.openpty()
    env = arena_env()
    env.pop("ARENA_NO_COLOR")
    env["TERM"] = "xterm-256color"
    env["COLUMNS"] = "400"
    process = subprocess.Popen(
        [*ARENA, "status", "--root", str(root)],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
        env=env,
        cwd=root,
    )
    os.close(follower)
    output = bytearray()

    def read_all() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            output.extend(chunk)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    try:
        assert process.wait(WAIT) == 0
        reader.join(WAIT)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    return bytes(output)


def test_arena_status_on_a_pipe_shows_the_escapes_of_a_job_name(workspace: Path) -> None:
    out = _status_on_a_pipe(workspace)
    for raw in RAW:
        assert raw not in out, raw
    text = out.decode()
    for shown in SHOWN:
        assert shown in text, (shown, text)


@pytest.mark.skipif(sys.platform == "win32", reason="a pty is POSIX")
def test_arena_status_on_a_terminal_shows_the_escapes_of_a_job_name(workspace: Path) -> None:
    out = _status_on_a_terminal(workspace)
    for raw in RAW:
        assert raw not in out, raw
    text = out.decode()
    for shown in SHOWN:
        assert shown in text, (shown, text)


def test_trainer_lines_and_notes_are_shown_not_obeyed() -> None:
    line = {"stream": "stdout", "text": "loss 1\x1b]52;c;ZXZpbA==\x07 \u2066x\u2069"}
    written = io.StringIO()
    write_line(written, plain_line(line))  # what a pipe gets
    assert written.getvalue() == "loss 1^[]52;c;ZXZpbA==^G <U+2066>x<U+2069>\n"
    assert styled_line({**line, "stream": "stderr"}).plain.endswith(
        "loss 1^[]52;c;ZXZpbA==^G <U+2066>x<U+2069>"
    )
    stream = io.StringIO()
    write_line(stream, "started run r of job \x1b[31mred\x9b")
    assert stream.getvalue() == "started run r of job ^[[31mred<U+009B>\n"


def test_visible_leaves_ordinary_text_alone() -> None:
    text = "tiny-lm · step 15/15 · loss 0.42\tckpt-15.pt · héllo 日本 🚀"
    assert visible(text) == text
    assert visible("\x00\x1f\x7f\u200f\ufeff") == "^@^_^?<U+200F><U+FEFF>"


def test_arena_status_json_stays_json_with_the_name_escaped(workspace: Path) -> None:
    done = subprocess.run(
        [*ARENA, "status", "--json", "--root", str(workspace)],
        capture_output=True,
        env=arena_env(),
        cwd=workspace,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout and "\u202e".encode() not in done.stdout
    names = [j["name"] for j in json.loads(done.stdout)["jobs"]]
    assert EVIL_NAME in names, "--json gives the name exactly (JSON escapes it)"
