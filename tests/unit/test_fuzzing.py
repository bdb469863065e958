"""The fast lane tries a share of each property test's examples; every other run tries them all
(tests/helpers/fuzzing.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import fuzzing

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("markexpr", "environ", "fast"),
    [
        ("not process", {}, True),
        ("not  process and not slow", {}, True),
        ("not process", {"ARENA_FUZZ": "full"}, False),
        ("", {}, False),
        ("process", {}, False),
    ],
)
def test_only_a_run_without_the_process_tests_is_the_fast_lane(
    markexpr: str, environ: dict[str, str], fast: bool
) -> None:
    assert fuzzing.is_fast_lane(markexpr, environ) is fast


def test_the_fast_lane_tries_a_fifth_and_never_fewer_than_its_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzzing, "_fast_lane", True)
    assert [fuzzing.examples(n) for n in (400, 60, 20, 5)] == [80, 12, 10, 5]
    monkeypatch.setattr(fuzzing, "_fast_lane", False)
    assert [fuzzing.examples(n) for n in (400, 60, 20, 5)] == [400, 60, 20, 5]


def test_every_property_test_counts_its_examples_through_the_helper() -> None:
    """A literal count (``max_examples`` set to a number) would run all of them in the fast lane too."""
    literal = re.compile(r"max_examples\s*=\s*\d")
    offenders = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in sorted(TESTS.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert offenders == []
