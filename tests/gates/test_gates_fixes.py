"""Quick fixes: applying a finding's edits gives code that no longer fires the rule."""

from __future__ import annotations

import ast

import pytest

from arena_ls.gates import Finding, lint_trainer, suppression_edit
from tests.gates.support import FIXTURES, apply_edits, codes, only

PARSER = """\
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=3e-4)
parser.add_argument(
    "--steps",
    type=int,
    default=1000,
)  # how long
args = parser.parse_args()
first_step = getattr(args, "start_step", 0)  # used once the option exists (AR008)
"""


def _fixed(source: str, code: str) -> tuple[Finding, str]:
    finding = only(lint_trainer(source), code)[0]
    assert finding.edits, f"{code} should carry a fix"
    return finding, apply_edits(source, finding.edits)


@pytest.mark.parametrize("code", ["AR007", "AR008"])
def test_option_fix_inserts_after_the_last_add_argument(code: str) -> None:
    finding, fixed = _fixed(PARSER, code)
    assert finding.fix_title == {"AR007": "Add a --resume option", "AR008": "Add a --start-step option"}[code]
    lines = fixed.splitlines()
    inserted = lines[lines.index(")  # how long") + 1]
    assert inserted.startswith("parser.add_argument(")
    assert ("--resume" if code == "AR007" else "--start-step") in inserted
    ast.parse(fixed)
    assert code not in codes(fixed)


def test_both_option_fixes_together() -> None:
    findings = lint_trainer(PARSER)
    edits = [edit for finding in findings if finding.code in ("AR007", "AR008") for edit in finding.edits]
    fixed = apply_edits(PARSER, edits)
    ast.parse(fixed)
    assert not codes(fixed) & {"AR007", "AR008"}
    args = fixed.replace("args = parser.parse_args()", "args = parser.parse_args([])")
    namespace: dict[str, object] = {}
    exec(compile(args.replace("import torch\n", ""), "fixed", "exec"), namespace)
    parsed = namespace["args"]
    assert parsed.resume is False and parsed.start_step == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("relative", ["ar007/fires_no_resume.py", "ar008/fires_no_start_step.py"])
def test_option_fix_keeps_indentation_and_parser_variable(relative: str) -> None:
    source = (FIXTURES / relative).read_text(encoding="utf-8")
    code = relative[:5].upper()
    finding, fixed = _fixed(source, code)
    new_line = fixed.splitlines()[finding.edits[0].line]
    last_existing = [line for line in source.splitlines() if ".add_argument(" in line][-1]
    indent = last_existing[: len(last_existing) - len(last_existing.lstrip())]
    receiver = last_existing.strip().split(".add_argument(")[0]
    assert new_line.startswith(f"{indent}{receiver}.add_argument(")
    assert code not in codes(fixed)


def test_option_fix_at_the_end_of_a_file_without_newline() -> None:
    source = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr')"
    _finding, fixed = _fixed(source, "AR007")
    assert fixed.endswith(
        'p.add_argument("--resume", action="store_true", help="resume from the latest checkpoint")'
    )
    assert "AR007" not in codes(fixed)


def test_option_fix_keeps_crlf_line_endings() -> None:
    source = PARSER.replace("\n", "\r\n")
    _finding, fixed = _fixed(source, "AR008")
    assert "\n" not in fixed.replace("\r\n", "")
    assert "AR008" not in codes(fixed)


def test_no_fix_without_an_add_argument_statement() -> None:
    finding = only(lint_trainer("import torch\n"), "AR007")[0]
    assert finding.edits == () and finding.fix_title is None


def test_no_fix_when_another_statement_shares_the_line() -> None:
    source = "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr'); args = p.parse_args()\n"
    assert only(lint_trainer(source), "AR007")[0].edits == ()


LOADER = """\
import argparse
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=6)
args = parser.parse_args()
a = DataLoader(ds, batch_size=8, num_workers=4)
b = DataLoader(ds, num_workers=args.workers)
"""


def test_num_workers_fix_sets_the_literal_to_zero() -> None:
    findings = only(lint_trainer(LOADER), "AR010")
    assert len(findings) == 2
    assert all(f.fix_title == "Set num_workers to 0" for f in findings)
    fixed = apply_edits(LOADER, [edit for f in findings for edit in f.edits])
    assert "num_workers=0)" in fixed and "default=0)" in fixed
    assert "AR010" not in codes(fixed)


def test_num_workers_from_cpu_count_has_no_mechanical_fix() -> None:
    source = (
        "import os\nfrom torch.utils.data import DataLoader\nd = DataLoader(ds, num_workers=os.cpu_count())\n"
    )
    finding = only(lint_trainer(source), "AR010")[0]
    assert finding.edits == () and finding.fix_title is None


class TestSuppressionEdit:
    def test_appends_an_ignore_comment(self) -> None:
        finding = only(lint_trainer(LOADER), "AR010")[0]
        edit = suppression_edit(LOADER, finding)
        fixed = apply_edits(LOADER, [edit])
        assert fixed.splitlines()[finding.line].endswith("num_workers=4)  # arena: ignore[AR010]")
        assert len(only(lint_trainer(fixed), "AR010")) == 1

    def test_merges_into_an_existing_ignore_comment(self) -> None:
        source = LOADER.replace("num_workers=4)", "num_workers=4)  # keep # arena: ignore[AR004]")
        finding = only(lint_trainer(source), "AR010")[0]
        fixed = apply_edits(source, [suppression_edit(source, finding)])
        assert fixed.splitlines()[finding.line].endswith("# keep # arena: ignore[AR004, AR010]")
        assert len(only(lint_trainer(fixed), "AR010")) == 1

    def test_keeps_other_comments(self) -> None:
        source = LOADER.replace("num_workers=4)", "num_workers=4)  # four is plenty")
        finding = only(lint_trainer(source), "AR010")[0]
        fixed = apply_edits(source, [suppression_edit(source, finding)])
        assert fixed.splitlines()[finding.line].endswith("# four is plenty  # arena: ignore[AR010]")

    def test_a_bare_ignore_needs_no_change(self) -> None:
        source = "x = 1  # arena: ignore\n"
        finding = Finding(code="AR001", message="m", severity="error", line=0, col=0, end_line=0, end_col=5)
        assert apply_edits(source, [suppression_edit(source, finding)]) == source

    def test_every_loop_level_finding_can_be_silenced(self) -> None:
        source = (FIXTURES / "ar005" / "fires_module_constant_overridden.py").read_text()
        for _ in range(20):
            findings = lint_trainer(source, fp32_only=True)
            if not findings:
                break
            source = apply_edits(source, [suppression_edit(source, findings[0])])
        assert lint_trainer(source, fp32_only=True) == []
        ast.parse(source)
