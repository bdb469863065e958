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
WARNINGS = FIXTURES / "ar012" / "fires_eval_every_5_retry_inside_each_micro_step.py"
AMP = FIXTURES / "ar011" / "fires_hf_fp16.py"


def run(argv: list[str], **kwargs: object) -> tuple[int, str]:
    out = io.StringIO()
    code = main_check(argv, stdout=out, **kwargs)  # type: ignore[arg-type]
    return code, out.getvalue()


def test_clean_file_exits_0_and_says_all_clean() -> None:
    assert run([str(CLEAN)]) == (0, "all clean: 1 file\n")
    assert run([str(CLEAN), str(CLEAN.parent / "retry_inside_each_micro_step.py")]) == (
        0,
        "all clean: 2 files\n",
    )


def test_error_findings_exit_1_with_severity_and_a_summary() -> None:
    code, out = run([str(ERRORS)])
    assert code == 1
    assert out.splitlines() == [
        f"{ERRORS}:31:8: error AR005 checkpoint cadence above 500 steps: it saves every 2000 steps",
        f"{ERRORS}:32:9: error AR014 checkpoints are saved but the step saved is never "
        "announced: print an @arena checkpoint line after the save, or the run cannot be "
        "resumed from it",
        f"{ERRORS}:32:9: warning AR015 a checkpoint is saved straight to its final path: a kill during "
        "the save tears it: `'checkpoints/ckpt.pt'` is written in place, with no temporary file and "
        "os.replace, so a kill mid-save leaves no whole checkpoint to resume from",
        "2 errors, 1 warning in 1 file",
    ]


def test_warnings_only_exit_0() -> None:
    code, out = run([str(WARNINGS)])
    assert code == 0
    assert out.startswith(f"{WARNINGS}:29:5: warning AR015 ")
    assert f"\n{WARNINGS}:55:8: warning AR012 " in out
    assert out.endswith("\n0 errors, 2 warnings in 1 file\n")


def test_summary_counts_files_with_findings_and_information() -> None:
    from arena_ls.gates.check import summary

    def finding(severity: str) -> Finding:
        return Finding(
            code="AR000",
            message="m",
            severity=severity,  # type: ignore[arg-type]
            line=0,
            col=0,
            end_line=0,
            end_col=0,
        )

    a, b = Path("a.py"), Path("b.py")
    assert summary([], 3) == "all clean: 3 files"
    assert (
        summary([(a, finding("error")), (a, finding("error")), (b, finding("warning"))], 5)
        == "2 errors, 1 warning in 2 files"
    )
    assert summary([(a, finding("information"))], 1) == "0 errors, 0 warnings, 1 information in 1 file"


def test_fp32_only_flag_turns_on_ar011() -> None:
    assert run([str(AMP)]) == (0, "all clean: 1 file\n")
    code, out = run([str(AMP), "--fp32-only"])
    assert code == 0 and " warning AR011 " in out


def test_json_format() -> None:
    code, out = run(["--format", "json", str(ERRORS), str(WARNINGS)])
    assert code == 1
    items = json.loads(out)
    assert [item["code"] for item in items] == ["AR005", "AR014", "AR015", "AR015", "AR012"]
    first = items[0]
    assert first == {
        "path": str(ERRORS),
        "line": 31,
        "col": 8,
        "endLine": 31,
        "endCol": 24,
        "code": "AR005",
        "severity": "error",
        "message": "checkpoint cadence above 500 steps: it saves every 2000 steps",
    }


def test_json_format_with_no_findings_is_an_empty_array() -> None:
    code, out = run([str(CLEAN), "--format=json"])
    assert code == 0 and json.loads(out) == []


def test_syntax_error_file(tmp_path: Path) -> None:
    broken = tmp_path / "train.py"
    broken.write_bytes(b"for i in range(3)\n    pass\n")
    code, out = run([str(broken)])
    assert code == 1 and out.startswith(f"{broken}:1:18: error AR000 syntax error: ")


def test_a_folder_stands_for_its_python_files(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(ERRORS.read_text())
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text(CLEAN.read_text())
    (tmp_path / ".venv").mkdir()
    (tmp_path / ".venv" / "c.py").write_text("import torch\n")
    code, out = run([str(tmp_path)])
    assert code == 1
    *lines, total = out.splitlines()
    assert {line.split(":")[0] for line in lines} == {str(tmp_path / "a.py")}
    assert total.endswith(" in 1 file")


@pytest.mark.parametrize("argv", [["--format", "yaml", "x.py"], ["--nope"], ["missing.py"], []])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(argv)
    assert code == 2 and out == ""
    assert capsys.readouterr().err.startswith("arena check: ")


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out = run(["--help"])
    assert code == 0
    assert "--fp32-only" in capsys.readouterr().out


def test_manifests_are_skipped_without_the_hook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    assert run([str(manifest), str(CLEAN)]) == (0, "all clean: 1 file\n")
    assert "skipping manifest" in capsys.readouterr().err


class FakeManifestLinter:
    """Stands in for the lead's manifest linter: one finding, and the scripts it names."""

    def __init__(self, scripts: list[Path], severity: str = "information") -> None:
        self.scripts = scripts
        self.severity = severity
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> tuple[list[tuple[Path, Finding]], list[Path]]:
        self.calls.append(path)
        finding = Finding(
            code="AR109",
            message="the job needs approval",
            severity=self.severity,
            line=3,
            col=4,
            end_line=3,  # type: ignore[arg-type]
            end_col=9,
        )
        return [(path, finding)], self.scripts


def test_manifest_hook_lints_the_manifest_and_its_scripts(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    hook = FakeManifestLinter([ERRORS, ERRORS])
    code, out = run([str(manifest)], manifest_linter=hook)
    assert hook.calls == [manifest]
    assert code == 1
    assert out.splitlines()[:2] == [
        f"{manifest}:4:5: information AR109 the job needs approval",
        f"{ERRORS}:31:8: error AR005 checkpoint cadence above 500 steps: it saves every 2000 steps",
    ]
    assert out.splitlines()[-1] == "2 errors, 1 warning, 1 information in 2 files"


def test_no_path_with_the_hook_uses_the_default_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "manifest.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    hook = FakeManifestLinter([CLEAN])
    code, out = run([], manifest_linter=hook)
    assert hook.calls == [Path("training") / "manifest.json"]
    assert code == 0
    assert out == (
        "training/manifest.json:4:5: information AR109 the job needs approval\n"
        "0 errors, 0 warnings, 1 information in 1 file\n"
    )


def test_manifest_error_findings_count_for_the_exit_code(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    code, _out = run([str(manifest)], manifest_linter=FakeManifestLinter([], severity="error"))
    assert code == 1
