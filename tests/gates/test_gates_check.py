"""`arena check`: exit codes, the text and JSON formats, and the manifest hook."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from arena_ls.gates import Finding
from arena_ls.gates.check import main_check
from tests.gates.support import FIXTURES

CLEAN = FIXTURES / "clean" / "well_written.py"
ERRORS = FIXTURES / "ar005" / "fires_literal_2000.py"
WARNINGS = FIXTURES / "ar009" / "fires_no_stop.py"
AMP = FIXTURES / "ar011" / "fires_half_model.py"


def run(argv: list[str], **kwargs: object) -> tuple[int, str]:
    out = io.StringIO()
    code = main_check(argv, stdout=out, **kwargs)  # type: ignore[arg-type]
    return code, out.getvalue()


def test_clean_file_exits_0_and_prints_nothing() -> None:
    assert run([str(CLEAN)]) == (0, "")


def test_error_findings_exit_1_with_ruff_style_lines() -> None:
    code, out = run([str(ERRORS)])
    assert code == 1
    assert out == f"{ERRORS}:31:8: AR005 checkpoint cadence above 500 steps: it saves every " \
                  "2000 steps\n"


def test_warnings_only_exit_0() -> None:
    code, out = run([str(WARNINGS)])
    assert code == 0
    assert out.startswith(f"{WARNINGS}:29:1: AR009 ")


def test_fp32_only_flag_turns_on_ar011() -> None:
    assert run([str(AMP)]) == (0, "")
    code, out = run([str(AMP), "--fp32-only"])
    assert code == 0 and " AR011 " in out


def test_json_format() -> None:
    code, out = run(["--format", "json", str(ERRORS), str(WARNINGS)])
    assert code == 1
    items = json.loads(out)
    assert [item["code"] for item in items] == ["AR005", "AR009"]
    first = items[0]
    assert first == {"path": str(ERRORS), "line": 31, "col": 8, "endLine": 31, "endCol": 24,
                     "code": "AR005", "severity": "error",
                     "message": "checkpoint cadence above 500 steps: it saves every 2000 steps"}


def test_json_format_with_no_findings_is_an_empty_array() -> None:
    code, out = run([str(CLEAN), "--format=json"])
    assert code == 0 and json.loads(out) == []


def test_syntax_error_file(tmp_path: Path) -> None:
    broken = tmp_path / "train.py"
    broken.write_bytes(b"for i in range(3)\n    pass\n")
    code, out = run([str(broken)])
    assert code == 1 and out.startswith(f"{broken}:1:18: AR000 syntax error: ")


def test_a_folder_stands_for_its_python_files(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(ERRORS.read_text())
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text(CLEAN.read_text())
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "c.py").write_text("import torch\n")
    code, out = run([str(tmp_path)])
    assert code == 1
    assert {line.split(":")[0] for line in out.splitlines()} == {str(tmp_path / "a.py")}


@pytest.mark.parametrize("argv", [["--format", "yaml", "x.py"], ["--nope"], ["missing.py"], []])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(argv)
    assert code == 2 and out == ""
    assert capsys.readouterr().err.startswith("arena check: ")


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out = run(["--help"])
    assert code == 0
    assert "--fp32-only" in capsys.readouterr().out


def test_manifests_are_skipped_without_the_hook(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    assert run([str(manifest), str(CLEAN)]) == (0, "")
    assert "skipping manifest" in capsys.readouterr().err


class FakeManifestLinter:
    """Stands in for the lead's manifest linter: one finding, and the scripts it names."""

    def __init__(self, scripts: list[Path], severity: str = "information") -> None:
        self.scripts = scripts
        self.severity = severity
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> tuple[list[tuple[Path, Finding]], list[Path]]:
        self.calls.append(path)
        finding = Finding(code="AR109", message="the job needs approval",
                          severity=self.severity, line=3, col=4, end_line=3,  # type: ignore[arg-type]
                          end_col=9)
        return [(path, finding)], self.scripts


def test_manifest_hook_lints_the_manifest_and_its_scripts(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    hook = FakeManifestLinter([ERRORS, ERRORS])
    code, out = run([str(manifest)], manifest_linter=hook)
    assert hook.calls == [manifest]
    assert code == 1
    assert out.splitlines() == [
        f"{manifest}:4:5: AR109 the job needs approval",
        f"{ERRORS}:31:8: AR005 checkpoint cadence above 500 steps: it saves every 2000 steps",
    ]


def test_no_path_with_the_hook_uses_the_default_manifest(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "manifest.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    hook = FakeManifestLinter([CLEAN])
    code, out = run([], manifest_linter=hook)
    assert hook.calls == [Path("training") / "manifest.json"]
    assert code == 0
    assert out == "training/manifest.json:4:5: AR109 the job needs approval\n"


def test_manifest_error_findings_count_for_the_exit_code(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    code, _out = run([str(manifest)], manifest_linter=FakeManifestLinter([], severity="error"))
    assert code == 1
