"""The registry, the rule modules' fixed docstring layout, and docs/rules.md generated
from them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from arena_ls.gates import lint_trainer, rule_doc_url
from arena_ls.gates.docs import DEFAULT_OUTPUT, main, render
from arena_ls.gates.registry import RULES
from arena_ls.gates.rules.base import SECTIONS

CONTRACT_SEVERITIES = {
    "AR001": "error",
    "AR002": "error",
    "AR003": "warning",
    "AR004": "error",
    "AR005": "error",
    "AR006": "error",
    "AR007": "error",
    "AR008": "error",
    "AR009": "warning",
    "AR010": "warning",
    "AR011": "warning",
    "AR012": "warning",
    "AR014": "error",
    "AR015": "warning",
}


def test_registry_holds_every_trainer_code_in_order() -> None:
    assert list(RULES) == ["AR000", *CONTRACT_SEVERITIES]


@pytest.mark.parametrize("code", list(CONTRACT_SEVERITIES))
def test_default_severity_is_the_contracts(code: str) -> None:
    assert RULES[code].severity == CONTRACT_SEVERITIES[code]


@pytest.mark.parametrize("code", list(RULES))
def test_rule_metadata_and_docstring_shape(code: str) -> None:
    rule = RULES[code]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert rule.doc.summary.startswith(f"{code} {rule.name}: ")
    assert list(rule.doc.sections) == list(SECTIONS)
    assert all(rule.doc.sections[title].strip() for title in SECTIONS)
    assert rule.doc.example and rule.doc.instead
    assert (rule.check is None) == (code == "AR000")


@pytest.mark.parametrize("code", list(RULES))
def test_doc_example_fires_and_the_fix_does_not(code: str) -> None:
    rule = RULES[code]
    fired = {f.code for f in lint_trainer(rule.doc.example, fp32_only=True)}
    fixed = {f.code for f in lint_trainer(rule.doc.instead, fp32_only=True)}
    assert code in fired
    assert code not in fixed


def test_rules_md_is_up_to_date() -> None:
    current = DEFAULT_OUTPUT.read_text(encoding="utf-8")
    assert current == render(), "docs/rules.md is stale: run python -m arena_ls.gates.docs"


def test_rules_md_has_an_anchor_per_rule_with_its_severity_and_sections() -> None:
    text = render()
    for code, rule in RULES.items():
        section = text.split(f"\n## {code}\n", 1)[1].split("\n## ", 1)[0]
        assert f"Default severity: {rule.severity}" in section
        for title in SECTIONS:
            assert f"### {title}" in section
        assert rule.doc.example.strip() in section


def test_check_mode_exit_codes(tmp_path: Path) -> None:
    output = tmp_path / "rules.md"
    assert main(["--check", "--output", str(output)]) == 1
    assert main(["--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8") == render()
    assert main(["--check", "--output", str(output)]) == 0
    output.write_text(render() + "edited\n", encoding="utf-8")
    assert main(["--check", "--output", str(output)]) == 1


def test_rule_doc_url() -> None:
    assert rule_doc_url("AR004") == ("https://github.com/arena-ls/arena-ls/blob/main/docs/rules.md#ar004")


ALL_THE_ADVICE = Path(__file__).parent / "fixtures" / "clean" / "all_the_advice.py"
ADVICE_IS_AN_ABSENCE = {"AR000", "AR011"}  # valid Python; no half precision


def _added_lines(rule_code: str) -> set[str]:
    """The lines a rule's "Write instead" adds to its "Example that fires"."""
    doc = RULES[rule_code].doc
    before = {line.strip() for line in doc.example.splitlines()}
    return {line.strip() for line in doc.instead.splitlines() if line.strip() and line.strip() not in before}


@pytest.mark.parametrize("code", [code for code in RULES if code not in ADVICE_IS_AN_ABSENCE])
def test_the_all_advice_trainer_follows_each_rules_write_instead(code: str) -> None:
    trainer = {line.strip() for line in ALL_THE_ADVICE.read_text().splitlines()}
    missing = _added_lines(code) - trainer
    assert not missing, f"{ALL_THE_ADVICE.name} does not follow {code}'s advice: {missing}"


def test_following_all_the_advice_at_once_is_clean() -> None:
    assert lint_trainer(ALL_THE_ADVICE.read_bytes(), fp32_only=True) == []
    assert lint_trainer(ALL_THE_ADVICE.read_bytes(), fp32_only=None) == []


OMISSIONS = {"AR001", "AR002", "AR004", "AR007", "AR008", "AR009"}
"""Rules a "Write instead" snippet may fire only because it is a snippet: they ask for something
the rest of a trainer holds (an OOM retry, ``empty_cache``, a save in the loop, the two options,
a stop poll). Every other rule is about what is written: no fix may trip one."""


@pytest.mark.parametrize("code", list(RULES))
def test_each_rules_write_instead_trips_no_other_rule(code: str) -> None:
    """Regression (issue 27 item 9): AR001's fix (``empty_cache`` only in the ``except``) fired AR003,
    AR004's (a save with no announce line) fired AR014, AR009's (a save only on stop) AR005 and AR014."""
    doc = RULES[code].doc
    for fp32_only in (True, None):
        fixed = {f.code for f in lint_trainer(doc.instead, fp32_only=fp32_only)}
        assert fixed <= OMISSIONS - {code}, f"{code}'s fix fires {sorted(fixed - OMISSIONS)}"
        if code != "AR000":  # its example is a syntax error: no other rule reads it
            fired = {f.code for f in lint_trainer(doc.example, fp32_only=fp32_only)}
            assert fixed <= fired, f"following {code}'s advice adds {sorted(fixed - fired)}"
