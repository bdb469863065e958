"""``arena check`` through the ``arena`` entry point: no client stack loaded, and with no
PATH the files the editor lints (the manifest's scripts and every train.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.gates.support import FIXTURES

CLEAN = FIXTURES / "clean" / "well_written.py"
MANIFEST = {
    "version": 1,
    "jobs": [
        {
            "id": "tiny",
            "kind": "train",
            "command": "{python}",
            "args": ["training/runner.py"],
            "script": "training/runner.py",
            "status": "ready",
            "resume": {"args": ["--resume", "--start-step", "{step}"]},
        }
    ],
}
UNANNOUNCED = FIXTURES / "ar014" / "fires_save_never_announced.py"
PROBE = """
import sys
from arena_ls.client.entry import main
code = main(sys.argv[1:])
heavy = sorted(name for name in sys.modules
               if name.split(".")[0] in ("rich", "pygls", "lsprotocol", "asyncio")
               or name.startswith(("arena_ls.client.lspclient", "arena_ls.client.session",
                                   "arena_ls.protocol", "arena_ls.manifest")))
print("LOADED " + ",".join(heavy))
sys.exit(code)
"""


def _arena(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_loads_no_client_stack(tmp_path: Path) -> None:
    (tmp_path / "empty.py").write_text("")
    done = _arena(tmp_path, "check", "empty.py")
    *lines, loaded = done.stdout.splitlines()
    assert loaded == "LOADED ", done.stdout + done.stderr
    assert lines[0].startswith("empty.py:1:1: error AR")
    assert lines[-1].endswith(" in 1 file")
    assert done.returncode == 1


def test_options_before_check_and_json(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(CLEAN.read_text())
    done = _arena(tmp_path, "--root", str(tmp_path), "check", "good.py", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.rsplit("LOADED", 1)[0]) == []


def test_other_commands_and_help_go_to_the_full_client(tmp_path: Path) -> None:
    done = _arena(tmp_path, "check", "--help")
    assert done.returncode == 0
    assert "--fp32-only" in done.stdout


def test_no_path_lints_every_train_py_and_the_manifests_scripts(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "runner.py").write_text(CLEAN.read_text())
    (tmp_path / "training" / "manifest.json").write_text(json.dumps(MANIFEST))
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "train.py").write_text(UNANNOUNCED.read_text())
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "train.py").write_text("syntax error here (\n")
    done = _arena(tmp_path / "experiments", "check")
    output = done.stdout
    assert "train.py:42:9: error AR014 " in output, output + done.stderr
    assert ".venv" not in output
    summary = [line for line in output.splitlines() if " in " in line and "file" in line][-1]
    assert summary.endswith(" in 1 file")
    assert done.returncode == 1


def test_all_clean_summary_counts_every_file_read(tmp_path: Path) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "runner.py").write_text(CLEAN.read_text())
    (tmp_path / "training" / "manifest.json").write_text(json.dumps(MANIFEST))
    (tmp_path / "train.py").write_text(CLEAN.read_text())
    done = _arena(tmp_path, "check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all clean: 3 files" in done.stdout


def test_a_lint_of_a_trainer_loads_only_the_standard_library(tmp_path: Path) -> None:
    """The gates share ``Span`` with the manifest (``arena_ls.diagnostics``), which is why that
    module is plain dataclasses: ``arena check`` on a trainer loads no attrs, no pygls."""
    (tmp_path / "train.py").write_text(CLEAN.read_text())
    probe = (
        "import sys\n"
        "from arena_ls.client.entry import main\n"
        "code = main(sys.argv[1:])\n"
        "loaded = {name.split('.')[0] for name in sys.modules}\n"
        "print('THIRD-PARTY', sorted(loaded & {'attr', 'attrs', 'cattrs', 'pygls', 'psutil'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "check", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "THIRD-PARTY []", done.stdout
