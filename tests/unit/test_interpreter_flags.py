"""``-u -X utf8`` after ``-E``/``-I`` (contract 7.3): ``agent.interpreter``, through ``trainer_argv``."""

from __future__ import annotations

import pytest

from arena_ls.agent.interpreter import is_interpreter, with_stream_flags
from arena_ls.agent.trainer_start import trainer_argv

FLAGS = ["-u", "-X", "utf8"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["py", "-3.10", "-E", "t.py", "--x"], ["py", "-3.10", "-E", *FLAGS, "t.py", "--x"]),
        (["py", "-3.10-64", "-I", "t.py"], ["py", "-3.10-64", "-I", *FLAGS, "t.py"]),
        (["/usr/bin/python3.11", "-E", "t.py"], ["/usr/bin/python3.11", "-E", *FLAGS, "t.py"]),
        (["E:\\Python310\\python.exe", "-sE", "t.py"], ["E:\\Python310\\python.exe", "-sE", *FLAGS, "t.py"]),
        (["PYTHONW.EXE", "-E", "-W", "error", "t.py"], ["PYTHONW.EXE", "-E", "-W", "error", *FLAGS, "t.py"]),
        (["python", "-E", "-m", "pkg.train"], ["python", "-E", *FLAGS, "-m", "pkg.train"]),
        (["python", "-E", "-c", "print(1)"], ["python", "-E", *FLAGS, "-c", "print(1)"]),
        (["python", "-E", "-Xutf8", "t.py"], ["python", "-E", "-Xutf8", "-u", "t.py"]),
        (["python", "-Eu", "-X", "utf8=1", "t.py"], ["python", "-Eu", "-X", "utf8=1", "t.py"]),
        (["python", "-E"], ["python", "-E", *FLAGS]),
    ],
)
def test_flags_follow_the_interpreters_options(argv: list[str], expected: list[str]) -> None:
    assert with_stream_flags(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["py", "-3.10", "t.py", "-E"],  # the trainer's own -E
        ["python", "t.py"],
        ["node", "-E", "t.js"],
        ["npm", "run", "-E"],
        ["python", "-c", "-E"],
        ["/opt/pypy/bin/pypyx", "-E", "t.py"],
        [],
    ],
)
def test_other_command_lines_are_left_alone(argv: list[str]) -> None:
    assert with_stream_flags(argv) == argv


def test_interpreter_names() -> None:
    for name in (
        "py",
        "PY.EXE",
        "pyw",
        "python",
        "python3",
        "python3.10",
        "pythonw.exe",
        "C:\\P\\python.exe",
    ):
        assert is_interpreter(name), name
    for name in ("pypy3", "npm", "pytest", "python-config", "E:\\py\\node.exe"):
        assert not is_interpreter(name), name


def test_every_launch_and_relaunch_gets_them() -> None:
    argv = trainer_argv(["py", "-3.10", "-E", "train.py"], ["--resume", "--start-step", "{step}"], 500)
    assert argv == ["py", "-3.10", "-E", *FLAGS, "train.py", "--resume", "--start-step", "500"]
    assert trainer_argv(["py", "-E", "train.py"], [], None) == ["py", "-E", *FLAGS, "train.py"]
