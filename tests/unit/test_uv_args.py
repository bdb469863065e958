"""scripts/uv_args.py: uv is told exactly pip's configuration, or bootstrap keeps pip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers.by_path import load_module

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "uv_args.py"


@pytest.fixture(scope="module")
def uv_args() -> ModuleType:
    return load_module("uv_args", SCRIPT)


def test_a_variable_wins_over_the_install_section_which_wins_over_global(uv_args: ModuleType) -> None:
    listed = (
        "global.find-links='/global'\n"
        "global.index-url='https://global/simple'\n"
        "install.find-links='/install'\n"
        ":env:.find-links='/env'\n"
        "global.extra-index-url='file:///a file:///b'\n"
    )
    assert uv_args.merged_options(listed) == {
        "find-links": "/env",
        "index-url": "https://global/simple",
        "extra-index-url": "file:///a file:///b",
    }


def test_every_index_wheel_folder_and_constraint_is_passed_and_indexes_are_searched_as_pip_does(
    uv_args: ModuleType,
) -> None:
    arguments = uv_args.uv_arguments(
        {
            "extra-index-url": "file:///opt/pypi/simple file:///opt/more",
            "find-links": "/opt/wheels",
            "constraint": "/etc/c.txt",
            "cert": "/etc/ca.crt",
            "default-timeout": "180",
            "disable-pip-version-check": "1",
        }
    )
    assert arguments[:2] == ["SSL_CERT_FILE=/etc/ca.crt", "UV_HTTP_TIMEOUT=180"]
    pairs = list(zip(arguments[2::2], arguments[3::2], strict=True))
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip: the best version of every index
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///opt/more") in pairs
    assert ("--find-links", "/opt/wheels") in pairs
    assert ("--constraint", "/etc/c.txt") in pairs
    assert ("--index-url", "https://pypi.org/simple") in pairs  # pip's default index, said


def test_no_index_and_an_index_of_its_own_are_kept(uv_args: ModuleType) -> None:
    assert "--no-index" in uv_args.uv_arguments({"no-index": "true"})
    assert "https://pypi.org/simple" not in uv_args.uv_arguments({"no-index": "true"})
    assert "--no-index" not in uv_args.uv_arguments({"no-index": "false"})  # said off: pip's default
    arguments = uv_args.uv_arguments({"index-url": "https://mirror/simple"})
    assert arguments.count("--index-url") == 1 and "https://mirror/simple" in arguments


def test_an_option_uv_cannot_be_told_is_named_so_bootstrap_keeps_pip(uv_args: ModuleType) -> None:
    with pytest.raises(ValueError, match="require-hashes"):
        uv_args.uv_arguments({"find-links": "/w", "require-hashes": "1"})


def _run(variables: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, **variables)  # pip reads no file, only these variables
    return subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_the_script_reads_pips_real_configuration(tmp_path: Path) -> None:
    done = _run({"PIP_FIND_LINKS": str(tmp_path), "PIP_EXTRA_INDEX_URL": "file:///x file:///y"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[lines.index("--find-links") + 1] == str(tmp_path)
    assert [lines[i + 1] for i, line in enumerate(lines) if line == "--extra-index-url"] == [
        "file:///x",
        "file:///y",
    ]


def test_the_script_exits_3_naming_what_it_cannot_translate() -> None:
    done = _run({"PIP_REQUIRE_VIRTUALENV": "1"})
    assert done.returncode == 3 and done.stdout == ""
    assert "require-virtualenv" in done.stderr
