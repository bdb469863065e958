"""Input that is not a tidy trainer never raises: syntax errors, empty and huge files,
undecodable bytes, null bytes, odd line endings; and suppression comments."""

from __future__ import annotations

import pytest

from arena_ls.gates import lint_trainer
from tests.gates.support import codes, only

TRAINER = """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, num_workers=4)
for step, batch in enumerate(loader):
    loss = model(batch.cuda())  # a GPU trainer (a CPU-only one is exempt from AR001-AR003)
    loss.backward()
"""


def test_syntax_error_is_one_ar000_at_the_error() -> None:
    source = "import torch\n\nfor step in range(10)\n    loss.backward()\n"
    findings = lint_trainer(source, fp32_only=True)
    assert len(findings) == 1
    finding = findings[0]
    assert finding.code == "AR000"
    assert finding.severity == "error"
    assert finding.message.startswith("syntax error: ")
    assert (finding.line, finding.col) == (2, 21)
    assert finding.end_line >= finding.line


def test_syntax_error_column_counts_characters() -> None:
    findings = lint_trainer("s = 'é' ; x = (1 +\n", fp32_only=True)
    assert [(f.code, f.line, f.col) for f in findings] == [("AR000", 0, 14)]
    assert "never closed" in findings[0].message


def test_unclosed_bracket_at_end_of_file() -> None:
    findings = lint_trainer(TRAINER + "x = [\n")
    assert [f.code for f in findings] == ["AR000"]


@pytest.mark.parametrize("source", ["", "\n\n", "   \n", "# just a comment\n", b"", "\ufeff"])
def test_empty_files_report_the_missing_pieces_at_line_1(source: str | bytes) -> None:
    findings = lint_trainer(source, fp32_only=True)
    assert findings, "an empty trainer still has no loop, no save and no options"
    assert all(finding.line == 0 and finding.col == 0 for finding in findings)
    assert "AR000" not in {finding.code for finding in findings}


def test_a_20000_line_file_is_linted() -> None:
    filler = "".join(f"def helper_{i}(x):\n    return x * {i}\n\n" for i in range(7000))
    source = filler + TRAINER
    assert source.count("\n") > 20_000
    findings = lint_trainer(source, fp32_only=True)
    loop_line = source.count("\n") - 3
    assert {f.code for f in findings if f.line == loop_line} >= {"AR001", "AR002", "AR004"}
    assert only(findings, "AR010")[0].line == loop_line - 1


def test_non_utf8_bytes_are_decoded_with_replacement() -> None:
    source = b"# caf\xe9 \xff\xfe trainer\n" + TRAINER.encode() + b"print('\xe9')\n"
    findings = lint_trainer(source, fp32_only=True)
    assert "AR010" in {f.code for f in findings}
    assert "AR000" not in {f.code for f in findings}


def test_utf8_bom_and_columns_after_non_ascii_text() -> None:
    source = "\ufeff" + TRAINER.replace("dataset,", "dataset_é,")
    finding = only(lint_trainer(source.encode("utf-8")), "AR010")[0]
    line = source.lstrip("\ufeff").split("\n")[finding.line]
    assert line[finding.col : finding.end_col] == "num_workers=4"
    str_finding = only(lint_trainer(source), "AR010")[0]
    assert (str_finding.line, str_finding.col) == (finding.line, finding.col)


def test_null_bytes_are_a_syntax_error_at_their_position() -> None:
    findings = lint_trainer("x = 1\ny = 2\0\n")
    assert [(f.code, f.line, f.col) for f in findings] == [("AR000", 1, 5)]


def test_too_deeply_nested_code_is_a_syntax_error() -> None:
    findings = lint_trainer("x = " + "1 + " * 100_000 + "1\n")
    assert [f.code for f in findings] == ["AR000"]


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_other_line_endings_keep_positions(newline: str) -> None:
    source = TRAINER.replace("\n", newline)
    finding = only(lint_trainer(source), "AR010")[0]
    assert (finding.line, finding.col) == (3, 29)


def test_odd_but_valid_python_does_not_break_rules() -> None:
    source = """\
import torch
async def agen():
    async for batch in stream():
        async with lock:
            loss = (yield batch)
            loss.backward()
match cmd:
    case {"train": steps} if steps > 0:
        for _ in range(steps):
            try:
                pass
            except* ValueError:
                pass
lambda: [x for x in (y := range(3))]
"""
    assert "AR000" not in codes(source)


class TestSuppression:
    def test_line_comment_silences_that_code_on_that_line(self) -> None:
        source = TRAINER.replace("num_workers=4)", "num_workers=4)  # arena: ignore[AR010]")
        assert "AR010" not in codes(source)
        assert "AR001" in codes(source)

    def test_comma_list(self) -> None:
        loop = "for step, batch in enumerate(loader):"
        source = TRAINER.replace(loop, loop + "  # arena: ignore[AR001, AR002,AR009]")
        found = codes(source)
        assert not found & {"AR001", "AR002", "AR009"}
        assert "AR004" in found

    def test_comment_on_another_line_does_not_silence(self) -> None:
        source = "# arena: ignore[AR010]\n" + TRAINER
        assert "AR010" in codes(source)

    def test_file_level(self) -> None:
        source = TRAINER + "# arena: ignore-file[AR010, AR004]\n"
        found = codes(source)
        assert not found & {"AR010", "AR004"}
        assert "AR001" in found

    def test_bare_ignore_silences_every_code_on_the_line(self) -> None:
        loop = "for step, batch in enumerate(loader):"
        source = TRAINER.replace(loop, loop + "  # arena: ignore")
        assert not codes(source) & {"AR001", "AR002", "AR004", "AR009"}

    def test_text_inside_a_string_is_not_a_comment(self) -> None:
        source = TRAINER.replace("num_workers=4)", 'num_workers=4, name="# arena: ignore[AR010]")')
        assert "AR010" in codes(source)

    def test_ar011_silenced_for_the_file(self) -> None:
        source = "import torch\nx = torch.zeros(3, dtype=torch.bfloat16)\n"
        assert "AR011" in codes(source, fp32_only=True)
        assert "AR011" not in codes(source + "# arena: ignore-file[AR011]\n", fp32_only=True)


@pytest.mark.parametrize("fp32_only", [None, False])
def test_mixed_precision_is_only_reported_for_an_fp32_only_device(fp32_only: bool | None) -> None:
    source = TRAINER + "    scaler = torch.cuda.amp.GradScaler()\n"
    assert "AR011" in codes(source, fp32_only=True)
    assert "AR011" not in codes(source, fp32_only=fp32_only)


def test_findings_are_sorted_by_position() -> None:
    findings = lint_trainer(TRAINER, fp32_only=True)
    keys = [(f.line, f.col, f.code) for f in findings]
    assert keys == sorted(keys)


def test_a_rule_that_crashes_is_skipped_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from arena_ls.gates import registry
    from arena_ls.gates.rules.base import Rule

    def explode(_ctx: object) -> list[object]:
        raise RuntimeError("boom")

    broken = Rule(
        code="AR010",
        name="x",
        message="x",
        severity="warning",
        fix_title=None,
        doc=registry.RULES["AR010"].doc,
        check=explode,
    )  # type: ignore[arg-type]
    rules = dict(registry.RULES)
    rules["AR010"] = broken
    monkeypatch.setattr("arena_ls.gates.engine.RULES", rules)
    found = codes(TRAINER)
    assert "AR010" not in found
    assert "AR001" in found
    assert "rule AR010 failed" in caplog.text
